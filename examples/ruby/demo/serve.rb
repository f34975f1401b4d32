# frozen_string_literal: true

# The job runner behind WEBrick, as a Rails app would mount it, on 127.0.0.1:$PORT (0: any
# free port). Prints "runner listening on http://127.0.0.1:<port>/event_bridge/jobs" once it
# listens. With EVENT_BRIDGE_DEMO_STEPS_PER_DELIVERY=n, jobs of EventBridge::Steps stop once
# they completed n steps in a delivery (the runner's `stopping:` policy), and resume in the next.
#
#   EVENT_BRIDGE_WEBHOOK_SECRET=whsec_… GEM_HOME=target/packages/ruby ruby examples/ruby/demo/serve.rb

require "rack"
require "rack/handler/webrick"
require "webrick"
require_relative "jobs"

# As in a Rails app, whether or not this process publishes: the adapter reads
# EVENT_BRIDGE_PUBLISH_URL at the first publish (a retry_on re-enqueue), so it boots without.
ActiveJob::Base.queue_adapter = :event_bridge

# Made at boot, as config/routes.rb makes it (`mount EventBridge::JobRunner.new => …`).
per_delivery = ENV["EVENT_BRIDGE_DEMO_STEPS_PER_DELIVERY"]
stopping = per_delivery && ->(_delivery, steps) { steps >= Integer(per_delivery) }
runner = EventBridge::JobRunner.new(stopping: stopping)
app = Rack::Builder.new do
  map("/event_bridge/jobs") { run runner }
end

server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: Integer(ENV.fetch("PORT", "0")),
                                 AccessLog: [], Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN))
server.mount("/", Rack::Handler::WEBrick, app)
%w[INT TERM].each { |signal| trap(signal) { server.shutdown } }
$stdout.puts "runner listening on http://127.0.0.1:#{server.listeners.first.addr[1]}/event_bridge/jobs"
$stdout.flush
server.start
