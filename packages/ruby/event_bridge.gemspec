# frozen_string_literal: true

# The Ruby side of event-bridge, as a gem layout: `lib/` on the load path, then
#
#   require "event_bridge/rails"        # the ActiveJob adapter and the job runner
#
# Not published; in a Gemfile: gem "event_bridge", path: "path/to/event-bridge/examples/ruby".
# producer.rb beside it is a standalone script (ZooKeeper client, the zk gem), not part of it.
Gem::Specification.new do |spec|
  spec.name = "event_bridge"
  spec.version = "0.1.0"
  spec.summary = "ActiveJob adapter and Standard Webhooks job runner for event-bridge"
  spec.authors = ["event-bridge"]
  spec.license = "MIT"
  spec.files = Dir["lib/**/*.rb"]
  spec.require_paths = ["lib"]
  spec.required_ruby_version = ">= 2.7"
  # What Debian ships (ruby-activejob 6.1, ruby-rack 2.2); newer ActiveJob works the same way.
  spec.add_dependency "activejob", ">= 6.1"
  spec.add_dependency "rack", ">= 2.2"
end
