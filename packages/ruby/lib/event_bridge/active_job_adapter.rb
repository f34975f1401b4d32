# frozen_string_literal: true

require "active_job"
require_relative "publisher"
require_relative "fields"

module EventBridge
  # How a job becomes a task (the adapter below uses it; a test can too).
  module JobTask
    module_function

    # ActiveJob priority → event-bridge lane. ActiveJob leaves the meaning of a priority to
    # the backend; most (Delayed Job, Que, Solid Queue, GoodJob 4) read a smaller number as
    # more urgent, with 0 the usual default. So: below 0 high, 0 normal, above 0 low;
    # "high"/"normal"/"low" (strings or symbols) are taken as they are; nil sends nothing
    # (normal).
    def lane(priority)
      case priority
      when nil then nil
      when Integer then priority.negative? ? "high" : (priority.zero? ? "normal" : "low")
      when "high", "normal", "low", :high, :normal, :low then priority.to_s
      else raise ArgumentError, "priority #{priority.inspect}: an Integer or high, normal or low"
      end
    end

    # The task of `job`, due at `timestamp` (seconds since the epoch) or now: a delayed job's
    # task carries the time left as its `delay`, which the server turns into a due time by
    # ZooKeeper's clock at publish (so it never runs early, whatever this host's clock says of
    # ZooKeeper's). The idempotency key is the job's.
    def task(job, timestamp = nil, now: Time.now.to_f)
      task = { type: "active_job.#{job.queue_name}", payload: job.serialize,
               idempotency_key: key(job) }
      lane = lane(job.priority)
      task[:priority] = lane if lane
      delay_ms = timestamp && ((timestamp.to_f - now) * 1000).ceil
      task[:delay] = "#{delay_ms}ms" if delay_ms&.positive?
      Fields.check!(task)
    end

    # The job id on its first enqueue; a retry_on re-enqueue of the same job (same id, more
    # executions) is another task, so it gets another key.
    def key(job)
      executions = job.executions.to_i
      executions.zero? ? job.job_id : "#{job.job_id}-#{executions}"
    end
  end
end

module ActiveJob
  module QueueAdapters
    # `ActiveJob::Base.queue_adapter = :event_bridge`: `perform_later` publishes the job as
    # one task over HTTP to `process_events` (EVENT_BRIDGE_PUBLISH_URL, with
    # `Authorization: Bearer $EVENT_BRIDGE_PUBLISH_SECRET`) and sets `provider_job_id` to the
    # task's name. The variables are read at the first publish, not when the adapter is set: an
    # app that only runs jobs, or a `rails assets:precompile` without runtime secrets, boots
    # without them, and without the URL the first `perform_later` raises KeyError naming it. A
    # refused or failed publish raises EventBridge::PublishError from `perform_later` with the
    # server's message; it is not an ActiveJob::EnqueueError, so Rails 7's perform_later does
    # not turn it into a `false`.
    class EventBridgeAdapter
      def initialize(publisher = nil)
        @publisher = publisher
      end

      def enqueue(job)
        publish(job, nil)
      end

      def enqueue_at(job, timestamp)
        publish(job, timestamp)
      end

      # Rails 7.1's perform_all_later: every job in one publish, all or nothing. Each job gets
      # its task as provider_job_id (one whose key is taken gets the task that has it, as with
      # perform_later) and, on Rails 7.1+, successfully_enqueued; the count is all of them. A
      # refused or failed publish raises PublishError and enqueues none. No job sends nothing,
      # and needs no publish URL.
      def enqueue_all(jobs)
        return 0 if jobs.empty?

        tasks = jobs.map { |job| EventBridge::JobTask.task(job, job.scheduled_at&.to_f) }
        publisher.publish(tasks).zip(jobs) do |item, job|
          job.provider_job_id = name_of(item)
          job.successfully_enqueued = true if job.respond_to?(:successfully_enqueued=)
        end
        jobs.size
      end

      # Rails 7.2 asks; publishing is not part of the app's database transaction.
      def enqueue_after_transaction_commit?
        true
      end

      private

      def publisher
        @publisher ||= begin
          url = ENV["EVENT_BRIDGE_PUBLISH_URL"].to_s
          if url.empty?
            raise KeyError, "EVENT_BRIDGE_PUBLISH_URL is not set: the URL of process_events " \
                            "(https://<app>.vercel.app/api/process_events_vercel)"
          end

          EventBridge::Publisher.new(url: url, secret: ENV["EVENT_BRIDGE_PUBLISH_SECRET"])
        end
      end

      def publish(job, timestamp)
        item = publisher.publish([EventBridge::JobTask.task(job, timestamp)]).first
        job.provider_job_id = name_of(item)
        item
      end

      def name_of(item)
        item["task"] || item["id"]
      end
    end
  end
end
