//! A posted form's fields, repeated names kept (the dead-letter forms post one `name` per
//! selected letter).

/// The fields of an `application/x-www-form-urlencoded` body, in order.
pub struct Fields(Vec<(String, String)>);

pub fn fields(body: &[u8]) -> Fields {
    Fields(form_urlencoded::parse(body).into_owned().collect())
}

impl Fields {
    /// The first value of `name`.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order, without repeats.
    pub fn all(&self, name: &str) -> Vec<String> {
        let mut values: Vec<String> = Vec::new();
        for (_, value) in self.0.iter().filter(|(n, _)| n == name) {
            if !values.contains(value) {
                values.push(value.clone());
            }
        }
        values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_names_are_all_kept_once() {
        let form = fields(b"csrf=a%2Bb&name=task-1&name=task-2&name=task-1&action=redrive");
        assert_eq!(form.first("csrf"), Some("a+b"));
        assert_eq!(form.all("name"), ["task-1", "task-2"]);
        assert_eq!(form.first("missing"), None);
    }
}
