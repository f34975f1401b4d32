//! Recipes: the features beside the core. A recipe is a view of the [`Queue`](super::Queue)
//! (`queue.groups()`, `queue.keys()`, …) that holds no state of its own and writes through
//! the queue's session, layout and multi-ops, which it reaches by `Deref`. Each feature's code
//! lives on its recipe, in its own files; `Queue` keeps what every task needs (publish, claim,
//! hold, release, end, the lanes' walk), and calls a recipe only for a task that carries its
//! feature.

/// Declares recipe `$name`, reached from a queue by `$accessor()`.
macro_rules! recipe {
    ($(#[$doc:meta])* $name:ident, $accessor:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'q>(&'q crate::queue::Queue);

        impl std::ops::Deref for $name<'_> {
            type Target = crate::queue::Queue;

            fn deref(&self) -> &crate::queue::Queue {
                self.0
            }
        }

        impl crate::queue::Queue {
            #[doc = concat!("The [`", stringify!($name), "`] recipe of this queue.")]
            pub fn $accessor(&self) -> $name<'_> {
                $name(self)
            }
        }
    };
}
