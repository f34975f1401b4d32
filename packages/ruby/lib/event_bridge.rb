# frozen_string_literal: true

# event-bridge for Ruby, without Rails: the HTTP publisher and the checks it makes.
#
#   require "event_bridge"
#   publisher = EventBridge::Publisher.new(url: ENV.fetch("EVENT_BRIDGE_PUBLISH_URL"),
#                                          secret: ENV["EVENT_BRIDGE_PUBLISH_SECRET"])
#   publisher.publish([{ type: "order.paid", payload: { order: 7 } }])
#
# With ActiveJob: `require "event_bridge/rails"` (the queue adapter, EventBridge::JobRunner and
# EventBridge::Steps).

require_relative "event_bridge/version"
require_relative "event_bridge/fields"
require_relative "event_bridge/publisher"
require_relative "event_bridge/webhook_signature"
