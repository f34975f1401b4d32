//! The contract checker's consumer of stepped tasks (`chaos-stepper`): one `process` run of a
//! resumable Rust handler, as the `event-bridge process` command runs one with a sink, under the
//! run's time budget (`TIME_BUDGET_MS`) and the rest of the environment's settings. The chaos
//! test runs it again and again on a queue root of its own (see `steps` in the test).
//!
//! Each run does one new step of a task, and then, by the step's number, either stops it
//! (`Err(steps.stop())`: resume at once, in another run) or starts the next step and never
//! finishes it, so the run's deadline cuts it with a step recorded: progress in every run.
//! The last step finishes the task. Every step that runs logs `step ran` (target
//! `chaos_stepper`, INFO) with the task and the step's number, before its work.

use event_bridge::{Config, HandlerError, RunOptions, Session, Task, process};

/// Steps of a stepped task.
const STEPS: usize = 4;

struct Stepper;

impl event_bridge::Handler for Stepper {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        let steps = &task.steps;
        // The step this run ran (the first one its record did not hold).
        let mut new_here: Option<usize> = None;
        for n in 0..STEPS {
            let name = format!("step-{n}");
            let ran = |n: usize| tracing::info!(task = %task.name, step = n, "step ran");
            match new_here {
                None => {
                    let mut new = false;
                    let work = async {
                        new = true;
                        ran(n);
                        Ok::<_, HandlerError>(())
                    };
                    steps.step(&name, work).await?;
                    new_here = new.then_some(n);
                }
                Some(done) if done % 2 == 1 => return Err(steps.stop()),
                Some(_) => {
                    let endless = async {
                        ran(n);
                        std::future::pending::<Result<(), HandlerError>>().await
                    };
                    steps.step(&name, endless).await?;
                }
            }
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    event_bridge::logs::init_cli();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("chaos-stepper: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chaos-stepper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> event_bridge::Result<()> {
    let options = RunOptions {
        max_tasks: 8,
        concurrency: 8,
        deadline: tokio::time::Instant::now() + config.time_budget,
        margin: config.deadline_margin,
    };
    let session = Session::open(config, "chaos-stepper", None).await?;
    process::run(&session.queue(), &Stepper, &options).await?;
    Ok(())
}
