//! The book's runnable sessions: every fenced block marked `console,runs` in a page of
//! docs/book is run as it stands against the built `event-bridge`, in a chroot of its own, and
//! what each command prints must match what the page shows. So the Getting started page, the
//! guides and the other pages with such a block cannot go stale: a changed flag, output or exit
//! code fails here.
//!
//! A block is a shell session: `$ command` lines, `> ` lines continuing the command before
//! (a here-document), and the lines it prints. Each command runs with `bash -c` in a scratch
//! directory the page's commands share, with `target/<profile>` first on `PATH` and
//! `ZOOKEEPER_CONNECTION_STRING` naming the test's chroot; it must exit 0. Its standard output
//! must match the lines shown: `…` inside a line stands for any text, a line that is only `…`
//! for any number of lines; a command shown without output is not compared. A command may
//! leave a process running in the background (`… &`, a worker): each runs in a process group
//! of its own, which is killed when the page ends, passed or failed.
//!
//! `HOOK` names a webhook the test starts on loopback for the pages that deliver over HTTP
//! (book/hook.rs says what it answers). A page whose sessions name `$VERCEL` gets the
//! `process_events_vercel` binary serving on loopback as `cargo run --bin process_events_vercel`
//! would, on the page's chroot, its address in `VERCEL` and its secrets in `PUBLISH_SECRET` and
//! `CRON_SECRET`. Beside the workspace's binaries, the sessions use bash, coreutils, grep and
//! curl only.

mod hook;

use std::os::unix::process::CommandExt;
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use harness::vercel::VercelBinary;
use harness::{TestQueue, binary, workspace_root};

/// One command of a session and the output the page shows for it.
#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    shown: Vec<String>,
}

/// The text of every fenced block of `markdown` whose info string is `console,runs`.
fn runnable_blocks(markdown: &str) -> Vec<String> {
    fenced_blocks(markdown, "console,runs")
}

/// The commands of a session block, each with the output shown after it.
fn steps(block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_string(),
                shown: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            match line.strip_prefix("> ").or((line == ">").then_some("")) {
                Some(more) if step.shown.is_empty() => {
                    step.command.push('\n');
                    step.command.push_str(more);
                }
                _ => step.shown.push(line.to_string()),
            }
        } else {
            panic!("a runnable block must start with a `$ ` line, not {line:?}");
        }
    }
    steps
}

/// Whether `line` matches `pattern`, where each `…` of the pattern stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split('…');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether the printed lines match the shown ones, a shown line that is only `…` standing for
/// any number of lines.
fn output_matches(shown: &[String], printed: &[&str]) -> bool {
    match shown.split_first() {
        None => printed.is_empty(),
        Some((first, rest)) if first == "…" => {
            (0..=printed.len()).any(|skip| output_matches(rest, &printed[skip..]))
        }
        Some((first, rest)) => printed
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && output_matches(rest, more)),
    }
}

/// Runs every runnable block of the page at `page` (relative to docs/book/src), in order, in
/// one scratch directory, against a fresh chroot. Returns how many commands ran.
async fn run_page(page: &str) -> usize {
    let path = workspace_root().join("docs/book/src").join(page);
    let markdown = std::fs::read_to_string(&path).expect("read the page");
    let t = TestQueue::new().await;
    let scratch = std::env::temp_dir().join(format!("eb-book-{}", harness::uuid_like()));
    std::fs::create_dir_all(&scratch).unwrap();
    let hook = hook::Hook::start().await;
    let vercel = match markdown.contains("$VERCEL") {
        true => Some(VercelBinary::start("process_events_vercel", &t.config, &SECRETS).await),
        false => None,
    };
    let vercel_url = vercel
        .as_ref()
        .map(|v| format!("http://127.0.0.1:{}", v.port))
        .unwrap_or_default();
    let env = session_env(&t.config.zookeeper, &hook.url(), &vercel_url);
    let mut groups = Groups(Vec::new());
    let mut ran = 0;
    for step in runnable_blocks(&markdown).iter().flat_map(|b| steps(b)) {
        let child = bash(&step.command, &scratch, &env);
        if step.command.contains('&') {
            groups.0.push(child.id());
        }
        // The hook answers on this runtime's threads while the command runs.
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .expect("wait for bash");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let printed: Vec<&str> = stdout.lines().collect();
        let context = format!(
            "{page}: `{}`\nexit: {}\nstdout:\n{stdout}\nstderr:\n{}",
            step.command,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "the command failed\n{context}");
        assert!(
            step.shown.is_empty() || output_matches(&step.shown, &printed),
            "the output is not what the page shows:\n{}\n{context}",
            step.shown.join("\n")
        );
        ran += 1;
    }
    drop(groups);
    std::fs::remove_dir_all(&scratch).ok();
    ran
}

/// The secrets of the Vercel binary, given to the sessions too.
const SECRETS: [(&str, &str); 2] = [
    ("PUBLISH_SECRET", "book-publish"),
    ("CRON_SECRET", "book-cron"),
];

/// The environment of a page's commands: the built binaries first on `PATH`, the page's chroot,
/// the webhook's and the Vercel binary's addresses, the secrets.
fn session_env(zookeeper: &str, hook: &str, vercel: &str) -> Vec<(&'static str, String)> {
    let bin_dir = binary("event-bridge").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env = vec![
        ("PATH", path),
        ("ZOOKEEPER_CONNECTION_STRING", zookeeper.to_string()),
        ("HOOK", hook.to_string()),
        ("VERCEL", vercel.to_string()),
    ];
    env.extend(
        SECRETS
            .iter()
            .map(|(name, value)| (*name, value.to_string())),
    );
    env
}

/// `command` started with `bash -c` in `scratch`, in a process group of its own, with `env`
/// and without the settings of the test's own environment a page does not show.
fn bash(command: &str, scratch: &std::path::Path, env: &[(&str, String)]) -> std::process::Child {
    Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(scratch)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .env_remove("EVENT_BRIDGE_ROOT")
        .env_remove("ROUTES")
        .env_remove("ROUTES_FILE")
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run bash")
}

/// The process groups of a page's commands that may leave one running in the background
/// (`&`): killed when the page ends, also when it fails.
struct Groups(Vec<u32>);

impl Drop for Groups {
    fn drop(&mut self) {
        for &group in &self.0 {
            // SAFETY: kill(2) with a negative pid signals that process group; an ended group
            // answers ESRCH, which is ignored.
            unsafe {
                libc::kill(-(group as i32), libc::SIGKILL);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_getting_started_page_runs_as_written() {
    let ran = run_page("getting-started.md").await;
    assert!(
        ran >= 6,
        "only {ran} commands found on the Getting started page"
    );
}

/// Every other page with a runnable session, each on a chroot of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_pages_run_as_written() {
    let src = workspace_root().join("docs/book/src");
    let mut pages = Vec::new();
    markdown_files(&src, &src, &mut pages);
    pages.retain(|page| page != "getting-started.md");
    let mut ran = 0;
    for page in &pages {
        let markdown = std::fs::read_to_string(src.join(page)).unwrap();
        if !runnable_blocks(&markdown).is_empty() {
            ran += run_page(page).await;
        }
    }
    assert!(ran > 0, "no other page has a runnable session");
}

/// The Markdown files under `dir`, as paths relative to `src`.
fn markdown_files(src: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(
                path.strip_prefix(src)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    out.sort();
}

#[test]
fn sessions_are_read_and_matched_as_documented() {
    let page = "Text\n\n```console,runs\n$ cat > f <<'EOF'\n> a\n> EOF\n$ echo x\nx …\n…\nz\n```\n\n```sh\n$ not run\n```\n";
    let steps: Vec<Step> = runnable_blocks(page)
        .iter()
        .flat_map(|b| steps(b))
        .collect();
    assert_eq!(
        steps,
        [
            Step {
                command: "cat > f <<'EOF'\na\nEOF".into(),
                shown: vec![]
            },
            Step {
                command: "echo x".into(),
                shown: vec!["x …".into(), "…".into(), "z".into()]
            },
        ]
    );
    let shown = &steps[1].shown;
    assert!(output_matches(shown, &["x 1", "z"]));
    assert!(output_matches(shown, &["x 1", "y", "y", "z"]));
    assert!(!output_matches(shown, &["x 1", "y"]));
    assert!(!output_matches(shown, &["w 1", "z"]));
    assert!(line_matches(
        "{\"id\":\"…\",\"task\":\"t-0\"}",
        "{\"id\":\"ab\",\"task\":\"t-0\"}"
    ));
    assert!(!line_matches(
        "{\"id\":\"…\",\"task\":\"t-0\"}",
        "{\"id\":\"ab\",\"task\":\"t-1\"}"
    ));
    assert!(!line_matches("a", "ab"));
}

/// The build commands the Deploying page shows (in its `sh` blocks: each `sam validate`, `sam
/// build` and `vercel build`, a comment or an `&&` ending one) as the Vercel binary is named
/// there, `vercel` for any path to it.
fn deploy_commands(markdown: &str) -> Vec<String> {
    let mut commands = Vec::new();
    for block in fenced_blocks(markdown, "sh") {
        for line in block.lines() {
            let line = line.split('#').next().unwrap_or("");
            for command in line.split("&&") {
                let words: Vec<&str> = command
                    .split_whitespace()
                    .skip_while(|w| w.contains('='))
                    .collect();
                let Some((tool, args)) = words.split_first() else {
                    continue;
                };
                let tool = tool.rsplit('/').next().unwrap_or(tool);
                let builds = matches!(args.first(), Some(&"build" | &"validate"));
                if matches!(tool, "sam" | "vercel") && builds {
                    commands.push(format!("{tool} {}", args.join(" ")));
                }
            }
        }
    }
    commands
}

/// The text of every fenced block of `markdown` whose info string is `info`.
fn fenced_blocks(markdown: &str, info: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(i))) if &*i == info => {
                current = Some(String::new());
            }
            Event::Text(text) => {
                if let Some(block) = current.as_mut() {
                    block.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(current.take()),
            _ => {}
        }
    }
    blocks
}

/// The Deploying page shows the build commands `make deploy-check` runs, as it runs them: each
/// `sam validate`, `sam build` and `vercel build` of the page is a command of
/// scripts/deploy-check.sh (which calls the Vercel CLI as `"$vercel"`, and both builds through
/// `in_target_dir`).
#[test]
fn the_deploying_page_shows_the_commands_deploy_check_runs() {
    let root = workspace_root();
    let page = std::fs::read_to_string(root.join("docs/book/src/deploying.md")).unwrap();
    let script = std::fs::read_to_string(root.join("scripts/deploy-check.sh"))
        .unwrap()
        .replace("\"$vercel\"", "vercel");
    let script_commands: Vec<String> = script
        .lines()
        .map(|line| line.split("||").next().unwrap_or("").trim())
        // A build runs through `in_target_dir`, which only sets its target directory.
        .map(|command| command.trim_start_matches("in_target_dir ").to_string())
        .collect();
    let shown = deploy_commands(&page);
    for needed in ["sam validate", "sam build", "vercel build"] {
        assert!(
            shown.iter().any(|c| c.starts_with(needed)),
            "the Deploying page shows no `{needed}`: {shown:?}"
        );
    }
    for command in &shown {
        assert!(
            script_commands.contains(command),
            "the Deploying page shows `{command}`, which scripts/deploy-check.sh does not run \
             (its commands: sam validate --lint, sam build, vercel build --yes)"
        );
    }
}

#[test]
fn deploy_commands_are_read_from_the_sh_blocks() {
    let page = "```sh\nmake x   # sam build here is a comment\nsam build && sam deploy --guided\n\
                A=1 tools/v/.bin/vercel build --yes\n```\n\n```console\nsam validate\n```\n";
    assert_eq!(deploy_commands(page), ["sam build", "vercel build --yes"]);
}

/// Pages of Guides and Operating that show no runnable session, and why.
const WITHOUT_SESSION: &[(&str, &str)] = &[(
    "operating/traces.md",
    "its spans go to an OTLP receiver, which a shell session cannot read back \
     (tests/sinks/traces.rs checks them)",
)];

/// Every guide and every operating page has a session that runs (but those
/// [`WITHOUT_SESSION`] names), so that none of them shows commands no test runs.
#[test]
fn every_guide_and_operating_page_has_a_runnable_session() {
    let src = workspace_root().join("docs/book/src");
    let mut pages = Vec::new();
    markdown_files(&src, &src.join("guides"), &mut pages);
    markdown_files(&src, &src.join("operating"), &mut pages);
    assert!(pages.len() >= 20, "guides and operating pages: {pages:?}");
    let missing: Vec<&String> = pages
        .iter()
        .filter(|page| !WITHOUT_SESSION.iter().any(|(p, _)| p == page))
        .filter(|page| {
            let markdown = std::fs::read_to_string(src.join(page)).unwrap();
            runnable_blocks(&markdown).is_empty()
        })
        .collect();
    assert!(
        missing.is_empty(),
        "no `console,runs` session on {missing:?}"
    );
}
