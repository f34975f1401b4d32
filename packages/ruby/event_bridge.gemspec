# frozen_string_literal: true

require_relative "lib/event_bridge/version"

# The Ruby side of event-bridge. `make packages` builds it (`gem build`) and installs the .gem
# into a fresh GEM_HOME under target/packages/, where the Rails flow test uses it. Not on
# rubygems.org: install the built file (`gem install --local event_bridge-VERSION.gem`) or, in
# a Gemfile, `gem "event_bridge", path: "path/to/event-bridge/packages/ruby"`.
Gem::Specification.new do |spec|
  spec.name = "event_bridge"
  spec.version = EventBridge::VERSION
  spec.summary = "Publish event-bridge tasks over HTTP; an ActiveJob adapter, a signed job " \
                 "runner and resumable steps"
  spec.description = "Ruby for event-bridge, a task queue on ZooKeeper: EventBridge::Publisher " \
                     "(HTTP publish), the :event_bridge ActiveJob queue adapter, " \
                     "EventBridge::JobRunner (a Rack app that runs the jobs event-bridge " \
                     "delivers as Standard Webhooks) and EventBridge::Steps (jobs that stop " \
                     "and resume across deliveries)."
  spec.authors = ["event-bridge"]
  spec.license = "MIT"
  spec.files = Dir["lib/**/*.rb", "README.md"]
  spec.require_paths = ["lib"]
  spec.required_ruby_version = ">= 2.7"
  # What Debian 12 ships (ruby-activejob 6.1, ruby-rack 2.2); newer ActiveJob works the same way.
  spec.add_dependency "activejob", ">= 6.1", "< 9"
  spec.add_dependency "rack", ">= 2.2", "< 4"
end
