# frozen_string_literal: true

require "json"
require "active_job"
require "active_support/concern"
require_relative "delivery"

module EventBridge
  # Resumable jobs: a job made of steps, which event-bridge runs over as many deliveries as it
  # takes, each one starting where the one before stopped. The API has the shape of Rails 8.1's
  # Active Job Continuations (`ActiveJob::Continuable`), so that a job can later move to Rails'
  # own by changing its `include`:
  #
  #   class ImportJob < ApplicationJob
  #     include EventBridge::Steps
  #
  #     def perform(import_id)
  #       @import = Import.find(import_id)   # outside any step: runs on every delivery
  #
  #       step :validate do
  #         @import.validate!
  #       end
  #
  #       step :rows do |step|               # step.cursor: nil at first, then where it stopped
  #         @import.rows.find_each(start: step.cursor) do |row|
  #           row.load!
  #           step.advance!(from: row.id)    # the cursor becomes row.id + 1
  #         end
  #       end
  #
  #       step :finish                       # a method: `def finish` or `def finish(step)`
  #     end
  #   end
  #
  # # Steps and cursors
  #
  # `step name, start: nil, isolated: false`, with a block or naming a method, runs its work
  # the first time perform meets it. Names are Symbols, met in the same order on every
  # delivery, each once, never one inside another. A step that completed is skipped on later
  # deliveries (its block is not called). A step that was stopped inside resumes with the
  # cursor it had: `step.cursor` (`start:` the first time), moved by `step.set!(value)` or
  # `step.advance!(from: value)` (`from.succ`, from the cursor without `from:`). A cursor is
  # anything ActiveJob can serialize as an argument. `step.resumed?` says the step was stopped
  # in an earlier delivery, `step.advanced?` that its cursor moved in this one.
  #
  # # Stopping
  #
  # A job stops only at a checkpoint: before each step once this delivery has made progress (a
  # step completed, a cursor moved), and at every `set!`, `advance!` and `checkpoint!` (of the
  # step or the job). There it asks `stopping?`, which is true when
  #
  # - the delivery's deadline (`X-Event-Bridge-Deadline`, by the sender's clock), less the
  #   runner's `deadline_margin`, has passed; or
  # - the runner's `stopping:` policy says so (see JobRunner).
  #
  # When it is, the job raises EventBridge::Steps::Interrupt, an Exception and not a
  # StandardError (so `rescue => e`, `retry_on` and `rescue_from` let it through), which this
  # module catches around perform: the job returns, and the runner answers `202` with
  # `{"checkpoint": …}`. event-bridge keeps the checkpoint in the task and delivers it again at
  # once, counting no attempt; the next delivery's envelope carries it (`resume.checkpoint`,
  # `EventBridge.delivery.checkpoint`), and the job skips and resumes from it. `isolated: true`
  # gives a step a delivery of its own: the job stops before it when this delivery has already
  # made progress.
  #
  # Outside a JobRunner delivery of this very job (`perform_now`, another queue backend, a job
  # performed inline by another) nothing stops: the steps all run in one go.
  #
  # # The checkpoint
  #
  #   {"completed": ["validate"], "current": {"name": "rows", "cursor": 1043}, "resumptions": 2}
  #
  # `completed`: the steps done, in order; `current`: the step stopped inside and its cursor
  # (ActiveJob's serialization of it), absent when the job stopped between steps;
  # `resumptions`: how many times the job had resumed from a checkpoint when it answered this
  # one (the job's `resumptions`: 0 in its first delivery). A checkpoint that does not fit the
  # job's steps (the code changed under a running task) raises InvalidStepError, as a
  # misnamed, repeated or nested step does; the runner answers those 422, which sends the task
  # to the dead letters with the message.
  #
  # # Errors
  #
  # A step that raises fails the delivery as any job does (500, event-bridge's retries): nothing
  # of this delivery's progress is kept, and the next attempt starts from the checkpoint
  # event-bridge has (the last 202's), so the steps this delivery completed run again. Keep
  # steps idempotent (the delivery's fencing token helps). A `retry_on` re-enqueue keeps
  # the progress: the new task's payload carries it (`event_bridge_steps`), as Rails keeps its
  # continuation in the job's data.
  #
  # # Moving to Rails 8.1
  #
  # `step` (block or method, `start:`, `isolated:`), the step's `cursor`, `set!`, `advance!`,
  # `checkpoint!`, `resumed?` and `advanced?`, and the job's `resumptions` are Rails'. Rails
  # asks its queue adapter's `stopping?` and resumes through `retry_job` (`resume_options`,
  # `max_resumptions`, `resume_errors_after_advancing`: none of them here); its progress lives
  # in the job data under `continuation`, so a task stopped under one API does not resume
  # under the other: switch once the running ones have finished. Include
  # one of the two modules, not both (both define `step`).
  module Steps
    extend ActiveSupport::Concern

    # Unwinds a job that stops, carrying its checkpoint. An Exception, not a StandardError.
    class Interrupt < Exception
      attr_reader :checkpoint

      def initialize(message, checkpoint)
        super(message)
        @checkpoint = checkpoint
      end
    end

    class Error < StandardError; end

    # A step misnamed, met twice, nested, or not where the checkpoint says.
    class InvalidStepError < Error; end

    # `advance!` on a cursor without `succ`.
    class UnadvanceableCursorError < Error; end

    # Where a re-enqueued job's data (retry_on) carries its progress.
    DATA_KEY = "event_bridge_steps"

    included do
      around_perform :perform_in_steps
    end

    # Runs the step `name` unless an earlier delivery completed it: the block, or the method
    # `name` (given the step when it takes an argument).
    def step(name, start: nil, isolated: false, &block)
      block ||= step_method(name)
      steps_progress.run(name, start: start, isolated: isolated, &block)
    end

    # Whether the job should stop at its next checkpoint (see "Stopping").
    def stopping?
      steps_progress.stopping?
    end

    # A checkpoint outside a step's cursor: stops the job here when `stopping?`.
    def checkpoint!
      steps_progress.checkpoint!
    end

    # How many earlier deliveries resumed this job from a checkpoint.
    def resumptions
      steps_progress.resumptions
    end

    def serialize
      data = super
      progress = @steps_progress
      data[DATA_KEY] = progress.to_checkpoint if progress&.started?
      data
    end

    def deserialize(job_data)
      super
      @steps_saved = job_data[DATA_KEY]
    end

    private

    def perform_in_steps
      @steps_progress = nil
      yield
    rescue Interrupt => e
      delivery = steps_delivery
      raise unless delivery

      delivery.stopped_with = e.checkpoint
      logger&.info("#{self.class.name} (Job ID: #{job_id}) #{e.message}: to be delivered again")
    end

    def steps_progress
      @steps_progress ||= begin
        delivery = steps_delivery
        saved = delivery&.checkpoint.nil? ? @steps_saved : delivery.checkpoint
        Progress.new(delivery, saved)
      end
    end

    # The runner's delivery when it is this job's.
    def steps_delivery
      delivery = EventBridge.delivery
      delivery if delivery && delivery.job_id == job_id
    end

    def step_method(name)
      callee = method(name)
      raise ArgumentError, "step method #{name} must take no argument or one (the step)" if callee.arity > 1

      callee.arity.zero? ? ->(_step) { callee.call } : callee
    end

    # One step of a job, as its block sees it.
    class Step
      attr_reader :name, :cursor

      def initialize(name, cursor, progress:, resumed:)
        @name = name
        @cursor = cursor
        @started_at = cursor
        @progress = progress
        @resumed = resumed
      end

      # Sets the cursor, then is a checkpoint.
      def set!(cursor)
        @cursor = cursor
        checkpoint!
      end

      # Moves the cursor to the one after `from` (the cursor when not given), then is a
      # checkpoint.
      def advance!(from: nil)
        from = cursor if from.nil?
        unless from.respond_to?(:succ)
          raise UnadvanceableCursorError, "cursor #{from.inspect} of step :#{name} has no succ"
        end

        set!(from.succ)
      end

      # Stops the job here when it is stopping.
      def checkpoint!
        @progress.checkpoint!
      end

      # Whether an earlier delivery stopped inside this step.
      def resumed?
        @resumed
      end

      # Whether the cursor moved in this delivery.
      def advanced?
        cursor != @started_at
      end
    end

    # What a job has done of its steps, from its checkpoint and in this delivery. Internal.
    class Progress
      attr_reader :resumptions

      def initialize(delivery, saved)
        @delivery = delivery
        completed, current, resumptions = parse(saved)
        @completed = completed
        @current = current && Step.new(current[0], current[1], progress: self, resumed: true)
        @resumptions = started? ? resumptions + 1 : 0
        @met = []
        @done_here = 0
        @running = nil
      end

      def run(name, start:, isolated:, &block)
        check(name)
        @met << name
        return if @completed.include?(name)

        interrupt!("before isolated step :#{name}") if isolated && @delivery && advanced?
        checkpoint! if advanced?
        @current ||= Step.new(name, start, progress: self, resumed: false)
        @running = @current
        block.call(@current)
        @completed << name
        @current = nil
        @done_here += 1
        nil
      ensure
        @running = nil
      end

      def stopping?
        @delivery ? @delivery.stopping?(@done_here) : false
      end

      def checkpoint!
        interrupt!("stopping") if stopping?
      end

      def started?
        !@completed.empty? || !@current.nil?
      end

      def to_checkpoint
        checkpoint = { "completed" => @completed.map(&:to_s) }
        if @current
          cursor = ActiveJob::Arguments.serialize([@current.cursor]).first
          checkpoint["current"] = { "name" => @current.name.to_s, "cursor" => cursor }
        end
        checkpoint["resumptions"] = @resumptions
        checkpoint
      end

      private

      # Progress in this delivery: a step completed, or the current one's cursor moved.
      def advanced?
        @done_here.positive? || (@current&.advanced? || false)
      end

      def interrupt!(why)
        raise Interrupt.new("stopped #{where} (#{why})", to_checkpoint)
      end

      def where
        return "in step :#{@current.name} at cursor #{@current.cursor.inspect}" if @current
        return "after step :#{@completed.last}" unless @completed.empty?

        "before its first step"
      end

      def check(name)
        invalid("step #{name.inspect} is not named by a Symbol") unless name.is_a?(Symbol)
        invalid("step :#{name} met twice in one perform") if @met.include?(name)
        invalid("step :#{name} inside step :#{@running.name}: steps do not nest") if @running
        if @current && @current.name != name && !@completed.include?(name)
          invalid("step :#{name} met where the checkpoint resumes step :#{@current.name}")
        end
        expected = @completed[@met.size]
        return if expected.nil? || expected == name

        invalid("step :#{name} met where the checkpoint has step :#{expected} done")
      end

      def invalid(message)
        raise InvalidStepError, message
      end

      # The checkpoint's completed steps, current step (name and cursor) and resumptions.
      def parse(saved)
        return [[], nil, 0] if saved.nil?

        completed = saved["completed"] if saved.is_a?(Hash)
        current = saved["current"] if saved.is_a?(Hash)
        unless completed.is_a?(Array) && completed.all?(String) &&
               (current.nil? || (current.is_a?(Hash) && current["name"].is_a?(String)))
          invalid("checkpoint #{saved.to_json[0, 100]} is not one of EventBridge::Steps")
        end
        current &&= [current["name"].to_sym, ActiveJob::Arguments.deserialize([current["cursor"]]).first]
        [completed.map(&:to_sym), current, saved["resumptions"].to_i]
      end
    end
    private_constant :Progress
  end
end
