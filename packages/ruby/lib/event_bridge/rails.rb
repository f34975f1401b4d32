# frozen_string_literal: true

# event-bridge for a Rails app (or any app with ActiveJob):
#
#   require "event_bridge/rails"
#   ActiveJob::Base.queue_adapter = :event_bridge      # or config.active_job.queue_adapter
#   mount EventBridge::JobRunner.new => "/event_bridge/jobs"   # config/routes.rb
#
# Settings, from the environment, read when first needed (so that the app boots without them):
#
# - EVENT_BRIDGE_PUBLISH_URL: process_events' HTTP entry
#   (https://<app>.vercel.app/api/process_events_vercel)
# - EVENT_BRIDGE_PUBLISH_SECRET: its PUBLISH_SECRET (Vercel's Bearer token)
# - EVENT_BRIDGE_WEBHOOK_SECRET: the whsec_ secret of the route that delivers to the runner
#
# See EventBridge::JobTask (how a job becomes a task), ActiveJob::QueueAdapters::
# EventBridgeAdapter (perform_later), EventBridge::JobRunner (running it, retries) and
# EventBridge::Steps (jobs that resume across deliveries).

require "active_job"
require_relative "version"
require_relative "publisher"
require_relative "delivery"
require_relative "active_job_adapter"
require_relative "steps"
require_relative "job_runner"

ActiveSupport.on_load(:active_job) { include EventBridge::DeliveryAccess }
