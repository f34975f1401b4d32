# frozen_string_literal: true

# Enqueues the demo jobs through the event_bridge adapter (perform_later publishes to
# $EVENT_BRIDGE_PUBLISH_URL) and prints one JSON line per job: its class, job id,
# provider_job_id, and when it was enqueued and is scheduled for (wall clock, ms).
#
#   GEM_HOME=target/packages/ruby ruby examples/ruby/demo/enqueue.rb [welcome reminder flaky retrying steps]
#
# Without arguments: welcome (plain), reminder (set(wait: 2)) and flaky (priority -1: the high
# lane; fails on its first attempt).

require_relative "jobs"

ActiveJob::Base.queue_adapter = :event_bridge

def shown(job, enqueued_at)
  scheduled = job.scheduled_at && (job.scheduled_at.to_f * 1000).floor
  puts JSON.generate(job: job.class.name, job_id: job.job_id, provider_job_id: job.provider_job_id,
                     enqueued_at_ms: enqueued_at, scheduled_at_ms: scheduled)
end

JOBS = {
  "welcome" => -> { Demo::WelcomeJob.perform_later("ada") },
  "reminder" => -> { Demo::ReminderJob.set(wait: 2).perform_later("grace") },
  "flaky" => -> { Demo::FlakyJob.set(priority: -1).perform_later("linus") },
  "retrying" => -> { Demo::RetryingJob.perform_later("barbara") },
  "steps" => -> { Demo::StepsJob.perform_later("import-7") }
}.freeze

(ARGV.empty? ? %w[welcome reminder flaky] : ARGV).each do |name|
  enqueued_at = (Time.now.to_f * 1000).floor
  shown(JOBS.fetch(name).call, enqueued_at)
end
