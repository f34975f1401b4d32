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
  Delivery = Struct.new(:task, :id, :idempotency_key, :fencing_token, :attempt, :job_id,
                        keyword_init: true)

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
