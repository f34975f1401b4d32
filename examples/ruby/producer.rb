# frozen_string_literal: true

# Publish event-bridge tasks from Ruby with the `zk` gem (gem install zk).
#
# NOT RUN BY THE TESTS: Debian packages no ZooKeeper client for Ruby (the zk gem). The Python
# and Node packages (packages/python, packages/node) write the same envelope and are tested
# against our consumers (tests/interop/interop.rs). A Rails app publishes over HTTP instead, with no
# ZooKeeper client: the event_bridge gem's `event_bridge/rails` (packages/ruby, tested in
# tests/interop/rails.rs).
#
# A task is a persistent sequential znode ROOT/tasks/task-NNNNNNNNNN holding an
# event-bridge/1 envelope (docs/ARCHITECTURE.md, "The task envelope").
#
#   zk = ZK.new(ENV.fetch("ZOOKEEPER_CONNECTION_STRING", "127.0.0.1:2181"))  # host:port[/chroot]
#   EventBridge.publish(zk, "user.signup", { user_id: 42 }, idempotency_key: "signup-42")
#   # => "task-0000000042"
#
# or: ruby producer.rb TYPE [PAYLOAD_JSON]   (prints {"task": "...", "id": "..."})
#
# It checks fields with the event_bridge gem's EventBridge::Fields (packages/ruby: install it,
# or run with `-I packages/ruby/lib`).

require "json"
require "securerandom"
require "time"
require "zk"
require "event_bridge/fields"

module EventBridge
  FORMAT = "event-bridge/1"
  MAX_BODY_BYTES = 1_000_000
  CONSUMER_FIELDS = %i[attempts last_error retry_at].freeze # consumers write these, never producers

  # Publishes one task; returns its name. `fields` may add group, idempotency_key, your own id…
  def self.publish(zk, type, payload, root: ENV.fetch("EVENT_BRIDGE_ROOT", "/event-bridge"),
                   **fields)
    bad = fields.keys.map(&:to_sym) & CONSUMER_FIELDS
    raise ArgumentError, "#{bad.join(', ')}: written by consumers only" unless bad.empty?

    body = Fields.check!({ format: FORMAT, id: SecureRandom.uuid, type: type,
                           time: Time.now.utc.iso8601(3), payload: payload }.merge(fields)).to_json
    if body.bytesize > MAX_BODY_BYTES
      raise ArgumentError, "task body is #{body.bytesize} bytes, over #{MAX_BODY_BYTES}"
    end

    root = root.chomp("/")
    zk.mkdir_p("#{root}/tasks") # no-op when present; NodeExists races are handled by the gem
    zk.mkdir_p("#{root}/leases")
    zk.create("#{root}/tasks/task-", body, mode: :persistent_sequential).split("/").last
  end
end

if $PROGRAM_NAME == __FILE__
  abort "usage: ruby producer.rb TYPE [PAYLOAD_JSON]" if ARGV.empty?
  zk = ZK.new(ENV.fetch("ZOOKEEPER_CONNECTION_STRING", "127.0.0.1:2181"))
  begin
    id = SecureRandom.uuid
    task = EventBridge.publish(zk, ARGV[0], JSON.parse(ARGV[1] || "{}"), id: id)
    puts({ task: task, id: id }.to_json)
  ensure
    zk.close!
  end
end
