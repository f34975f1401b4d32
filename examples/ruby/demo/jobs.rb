# frozen_string_literal: true

# Jobs for the Rails flow (tests/interop/rails.rs and `make demo-rails`). Each records every
# run as a JSON line in $EVENT_BRIDGE_DEMO_RECORD (or prints it to stderr): the job, its id,
# event-bridge's attempt and fencing token, the checkpoint it resumed from, the wall clock in
# ms, and what else the job adds (a step's side effect, where it stopped). They run on the
# event_bridge gem as installed from its .gem (`make packages`: GEM_HOME=target/packages/ruby).

require "json"
require "logger"
require "event_bridge/rails"

ActiveJob::Base.logger = Logger.new($stderr, level: Logger::WARN)

module Demo
  RECORD = ENV["EVENT_BRIDGE_DEMO_RECORD"]
  LOCK = Mutex.new

  def self.record(job, what, **details)
    delivery = job.event_bridge_delivery
    line = JSON.generate(what: what, job: job.class.name, job_id: job.job_id,
                         arguments: job.arguments, attempt: delivery&.attempt,
                         fencing_token: delivery&.fencing_token, task: delivery&.task,
                         resumed_from: delivery&.checkpoint, executions: job.executions,
                         at_ms: (Time.now.to_f * 1000).floor, **details)
    LOCK.synchronize do
      if RECORD
        File.open(RECORD, "a") { |f| f.puts(line) }
      else
        warn line
      end
    end
  end

  # Records a start, then a finish unless `work` raises.
  class RecordedJob < ActiveJob::Base
    def perform(*args)
      Demo.record(self, "start")
      work(*args)
      Demo.record(self, "done")
    end

    def work(*); end
  end

  class WelcomeJob < RecordedJob; end

  class ReminderJob < RecordedJob; end

  # Fails on event-bridge's first attempt: the runner answers 500 and event-bridge retries.
  class FlakyJob < RecordedJob
    def work(*)
      raise "first attempt fails on purpose" if event_bridge_delivery&.attempt == 1
    end
  end

  class Unavailable < StandardError; end

  # Always fails, under ActiveJob's own retry_on: re-enqueued once (a new task), then retry_on
  # gives up and the runner answers 422: straight to the dead letters.
  class RetryingJob < RecordedJob
    retry_on Unavailable, wait: 0, attempts: 2

    def work(*)
      raise Unavailable, "the partner is down"
    end
  end

  # Five steps, each recording its side effect ("step", with the step's name and, for the one
  # with a cursor, the part): both forms of `step`, and a cursor. Where it stops is recorded
  # too ("stopped", with the checkpoint the runner answers).
  class StepsJob < RecordedJob
    include EventBridge::Steps

    PARTS = 3

    around_perform do |job, block|
      block.call
    rescue EventBridge::Steps::Interrupt => e
      Demo.record(job, "stopped", checkpoint: e.checkpoint)
      raise
    end

    def work(*)
      step(:fetch) { Demo.record(self, "step", step: "fetch") }
      step :resize
      step :tag
      step :upload, start: 0 do |step|
        (step.cursor...PARTS).each do |part|
          Demo.record(self, "step", step: "upload", part: part)
          step.advance!
        end
      end
      step(:notify) { Demo.record(self, "step", step: "notify") }
    end

    private

    def resize(step)
      Demo.record(self, "step", step: step.name.to_s)
    end

    def tag
      Demo.record(self, "step", step: "tag")
    end
  end
end
