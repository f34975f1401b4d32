# frozen_string_literal: true

require "json"
require "active_job"
require "active_support/notifications"
require_relative "delivery"
require_relative "steps"
require_relative "webhook_signature"

module EventBridge
  # The Rack app an HTTP route of event-bridge delivers ActiveJob tasks to:
  #
  #   # config/routes.rb
  #   mount EventBridge::JobRunner.new => "/event_bridge/jobs"
  #
  #   # the route, in ROUTES of process_events (secret_env names a variable holding the same
  #   # whsec_ secret as EVENT_BRIDGE_WEBHOOK_SECRET here)
  #   "active_job.default": {"sink": "http", "url": "https://app.example/event_bridge/jobs",
  #                          "signature": "standard", "secret_env": "RAILS_JOBS_SECRET"}
  #
  # Each POST is one attempt of one task. The runner
  #
  # 1. checks its Standard Webhooks signature with EVENT_BRIDGE_WEBHOOK_SECRET (`whsec_…`) and
  #    a timestamp within 5 minutes; anything else gets 401 and runs nothing;
  # 2. takes the envelope's payload (the job's `serialize` hash) and runs it with
  #    `ActiveJob::Base.execute`, with the delivery (fencing token, attempt, task) readable as
  #    `EventBridge.delivery` or the job's `event_bridge_delivery` while it runs;
  # 3. answers 200 when the job returned, 500 when it raised: event-bridge then retries the
  #    task with backoff (BACKOFF_BASE_MS, doubling) and after MAX_ATTEMPTS claims moves it to
  #    the dead letters with the answer as its last error.
  # 4. answers 202 with `{"checkpoint": …}` when a job of EventBridge::Steps stopped between
  #    (or inside) its steps: event-bridge delivers the task again at once, with that
  #    checkpoint in the envelope (`resume.checkpoint`, handed to the job as
  #    `EventBridge.delivery.checkpoint`), and counts no attempt. A job whose steps break
  #    their rules or do not fit its checkpoint (EventBridge::Steps::Error) gets 422: straight
  #    to the dead letters.
  #
  # # When a job of steps stops
  #
  # At each of its checkpoints (see EventBridge::Steps) the job stops when
  #
  # - the delivery's deadline (`X-Event-Bridge-Deadline`) is less than `deadline_margin`
  #   seconds away (5 by default; make it longer than the longest stretch between two
  #   checkpoints, and mind the skew between the sender's clock and this one); or
  # - `stopping:`, when given, answers true: a callable given the delivery and the number of
  #   steps the job completed in it, asked at every checkpoint. For short deliveries (a step or
  #   two each, whatever the deadline), and for tests:
  #
  #     JobRunner.new(stopping: ->(_delivery, steps) { steps >= 1 })   # a step per delivery
  #     JobRunner.new(stopping: ->(delivery, _steps) { Time.now - delivery.received_at > 10 })
  #                                                      # about 10 s of steps per delivery
  #
  # Jobs without steps never stop: they run to their end, as before.
  #
  # # ActiveJob's retry_on and discard_on
  #
  # They run inside `execute`, before the runner sees anything:
  #
  # - `discard_on E`: the exception is swallowed, the runner answers 200, the task completes.
  # - `retry_on E, wait:, attempts: n`: ActiveJob re-enqueues the job (a new task, through this
  #   app's queue adapter, delayed by `wait`) and swallows the exception: 200, this task
  #   completes and the new one carries the retry. When the n attempts are used up, retry_on
  #   raises (unless given a block): ActiveJob's policy for E has given up, so the runner
  #   answers 422 by default, which event-bridge does not retry: the task goes to the dead
  #   letters at once, with the exception as the reason, instead of being run MAX_ATTEMPTS
  #   more times. `JobRunner.new(retry_stopped_status: 500)` lets event-bridge retry it too.
  # - An exception no handler names: 500, event-bridge's retries. This is the default we
  #   recommend: leave retries to event-bridge (one count, one backoff, the dead letters and
  #   redrive in the dashboard), and keep retry_on for errors that want ActiveJob's own
  #   schedule. ActiveJob's `executions` does not count event-bridge's attempts (each attempt
  #   runs the payload as it was published); read `event_bridge_delivery.attempt` for those.
  class JobRunner
    JSON_TYPE = { "Content-Type" => "application/json" }.freeze

    # `secret` defaults to EVENT_BRIDGE_WEBHOOK_SECRET as it is at the first request, so that
    # routes.rb loads without it (a `rails assets:precompile` without runtime secrets); until
    # it is set (and a whsec_ secret), every delivery gets 500 naming it and runs nothing.
    def initialize(secret: nil, tolerance: WebhookSignature::TOLERANCE_SECONDS, retry_stopped_status: 422,
                   deadline_margin: 5, stopping: nil)
      raise ArgumentError, "stopping: must respond to call" unless stopping.nil? || stopping.respond_to?(:call)

      @secret = secret
      @tolerance = tolerance
      @retry_stopped_status = retry_stopped_status
      @deadline_margin = deadline_margin
      @stopping = stopping
    end

    def call(env)
      return answer(405, error: "Method Not Allowed", message: "POST a task") unless env["REQUEST_METHOD"] == "POST"
      return answer(500, error: "Misconfigured", message: @misconfigured) unless signature

      body = read(env)
      problem = signature.problem(id: env["HTTP_WEBHOOK_ID"], timestamp: env["HTTP_WEBHOOK_TIMESTAMP"],
                                  signature: env["HTTP_WEBHOOK_SIGNATURE"], body: body)
      return answer(401, error: "Unauthorized", message: problem) if problem

      envelope, problem = job_envelope(body)
      return answer(422, error: "Unprocessable", message: problem) if problem

      run(envelope["payload"], delivery(env, envelope))
    end

    private

    # The signature check, made at the first request; nil (and why, in @misconfigured) while
    # the secret is unset or not a whsec_ one.
    def signature
      @signature ||= begin
        secret = @secret || ENV["EVENT_BRIDGE_WEBHOOK_SECRET"]
        raise ArgumentError, "not set (the route's whsec_ secret)" if secret.to_s.empty?

        WebhookSignature.new(secret, tolerance: @tolerance)
      rescue ArgumentError => e
        @misconfigured = "EVENT_BRIDGE_WEBHOOK_SECRET: #{e.message}"
        nil
      end
    end

    def read(env)
      input = env["rack.input"]
      return "" unless input

      input.rewind if input.respond_to?(:rewind)
      input.read.to_s
    end

    # A task's envelope whose payload is a job's data, or why the task is not one this runner
    # runs (422: event-bridge does not retry it, it goes to the dead letters).
    def job_envelope(body)
      envelope = JSON.parse(body)
      type = envelope["type"].to_s
      return [nil, "type #{type.inspect} is not active_job.<queue>"] unless type.start_with?("active_job.")

      payload = envelope["payload"]
      return [nil, "the payload is not a serialized job"] unless payload.is_a?(Hash) && payload["job_class"]

      [envelope, nil]
    rescue JSON::ParserError
      [nil, "the body is not JSON"]
    end

    def delivery(env, envelope)
      resume = envelope["resume"]
      delivery = Delivery.new(task: env["HTTP_X_EVENT_BRIDGE_TASK"], id: env["HTTP_WEBHOOK_ID"],
                              idempotency_key: env["HTTP_IDEMPOTENCY_KEY"],
                              fencing_token: env["HTTP_X_EVENT_BRIDGE_FENCING_TOKEN"]&.to_i,
                              attempt: env["HTTP_X_EVENT_BRIDGE_ATTEMPT"]&.to_i,
                              job_id: envelope["payload"]["job_id"],
                              deadline: deadline(env["HTTP_X_EVENT_BRIDGE_DEADLINE"]),
                              checkpoint: resume.is_a?(Hash) ? resume["checkpoint"] : nil)
      delivery.received_at = Time.now
      delivery.stop_margin = @deadline_margin
      delivery.stop_policy = @stopping
      delivery
    end

    # X-Event-Bridge-Deadline (ms since the Unix epoch) as a Time; nil when absent or not a
    # number.
    def deadline(header)
      ms = Integer(header.to_s, 10)
      Time.at(0, ms, :millisecond)
    rescue ArgumentError
      nil
    end

    def run(payload, delivery)
      stopped = false
      retry_stopped = lambda do |*, event|
        stopped = true if event[:job]&.job_id == delivery.job_id
      end
      EventBridge.with_delivery(delivery) do
        ActiveSupport::Notifications.subscribed(retry_stopped, "retry_stopped.active_job") do
          ActiveJob::Base.execute(payload)
        end
      end
      return answer(202, checkpoint: delivery.stopped_with) if delivery.stopped_with

      answer(200, ran: delivery.job_id)
    rescue StandardError => e
      status = if stopped then @retry_stopped_status
               elsif e.is_a?(Steps::Error) then 422
               else 500
               end
      answer(status, error: e.class.name, message: e.message.to_s[0, 200])
    end

    def answer(status, body)
      [status, JSON_TYPE.dup, [JSON.generate(body)]]
    end
  end
end
