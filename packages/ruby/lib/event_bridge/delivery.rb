# frozen_string_literal: true

module EventBridge
  # The delivery a job is running for, as the HTTP sink sent it:
  #
  # - `fencing_token`: grows with every claim of the task. A job that writes somewhere can
  #   refuse a token lower than the highest it stored for `idempotency_key`: a consumer whose
  #   lease has passed on then cannot overwrite its successor's work.
  # - `attempt`: event-bridge's claim number, 1 on the first (ActiveJob's `executions` counts
  #   only ActiveJob's own retries, see JobRunner).
  # - `task`: the task's znode name; `id`: the envelope id (`webhook-id`); `idempotency_key`:
  #   the `Idempotency-Key` header (the job id on a first enqueue).
  # - `deadline`: when the runner should have answered by (a Time, from the
  #   `X-Event-Bridge-Deadline` header, by the sender's clock: the run's stop or the route's
  #   `timeout_ms`, whichever comes first); nil when the header is absent.
  # - `checkpoint`: what the runner last answered a `202` with for this task (the envelope's
  #   `resume.checkpoint`); nil on a task's first delivery. EventBridge::Steps resumes from it.
  Delivery = Struct.new(:task, :id, :idempotency_key, :fencing_token, :attempt, :job_id,
                        :deadline, :checkpoint, keyword_init: true) do
    # Set by the JobRunner: when the request arrived (a Time), how many seconds before the
    # deadline a job stops at its next checkpoint, and its `stopping:` policy (nil: none).
    attr_accessor :received_at, :stop_margin, :stop_policy

    # Set by EventBridge::Steps when the job stopped: the checkpoint the runner answers 202
    # with.
    attr_accessor :stopped_with

    # Seconds left before the deadline (0 once passed), nil without one.
    def time_left(now = Time.now)
      deadline && [deadline - now, 0.0].max
    end

    # Whether a job with `steps_done` steps completed in this delivery should stop: the
    # deadline less the margin has passed, or the runner's policy says so.
    def stopping?(steps_done = 0)
      return true if deadline && Time.now >= deadline - (stop_margin || 0)

      stop_policy ? (stop_policy.call(self, steps_done) ? true : false) : false
    end
  end

  KEY = :event_bridge_delivery
  private_constant :KEY

  # The delivery being run on this thread (fiber), or nil outside a JobRunner request.
  def self.delivery
    Thread.current[KEY]
  end

  # Runs the block with `delivery` as the current one.
  def self.with_delivery(delivery)
    previous = Thread.current[KEY]
    Thread.current[KEY] = delivery
    yield
  ensure
    Thread.current[KEY] = previous
  end

  # Included into ActiveJob::Base by `require "event_bridge/rails"`: a job reads
  # `event_bridge_delivery` (nil when it was not run by the JobRunner, e.g. perform_now, or
  # for another job it runs inline).
  module DeliveryAccess
    def event_bridge_delivery
      delivery = EventBridge.delivery
      delivery if delivery && delivery.job_id == job_id
    end
  end
end
