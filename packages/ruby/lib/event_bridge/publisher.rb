# frozen_string_literal: true

require "json"
require "net/http"
require "openssl"
require "uri"

module EventBridge
  # A publish that event-bridge refused or that never got an answer. The message is the
  # server's (`{"error", "message"}`) or the network's; `status` is nil when no answer came.
  class PublishError < StandardError
    attr_reader :status

    def initialize(message, status: nil)
      super(message)
      @status = status
    end
  end

  # Publishes tasks over HTTP to `process_events` (the book's "Publishing over HTTP", docs/book/src/integrations/http.md): one POST
  # of JSON lines, all or nothing, answered 202 with one item per task.
  #
  #   publisher = EventBridge::Publisher.new(url: ENV.fetch("EVENT_BRIDGE_PUBLISH_URL"),
  #                                          secret: ENV["EVENT_BRIDGE_PUBLISH_SECRET"])
  #   publisher.publish([{ type: "order.paid", payload: { order: 7 }, idempotency_key: "o-7" }])
  #   # => [{"task" => "task-0000000042", "id" => "…", "status_url" => "…"}]
  #
  # Vercel's entry takes `Authorization: Bearer <PUBLISH_SECRET>`. Lambda's Function URL takes
  # SigV4 instead (its IAM auth): give `sign:`, a callable of (url, body) returning the headers
  # to add, e.g. with Debian's ruby-aws-sigv4 (not run by the tests: only AWS checks SigV4):
  #
  #   signer = Aws::Sigv4::Signer.new(service: "lambda", region: "eu-west-1",
  #                                   credentials_provider: Aws::InstanceProfileCredentials.new)
  #   sign = ->(url, body) { signer.sign_request(http_method: "POST", url: url, body: body).headers }
  #   ActiveJob::Base.queue_adapter = ActiveJob::QueueAdapters::EventBridgeAdapter.new(
  #     EventBridge::Publisher.new(url: ENV.fetch("EVENT_BRIDGE_PUBLISH_URL"), sign: sign))
  class Publisher
    # Bounds connecting and reading the answer, each.
    TIMEOUT_SECONDS = 10

    def initialize(url:, secret: nil, sign: nil, timeout: TIMEOUT_SECONDS)
      @uri = URI.parse(url)
      raise ArgumentError, "publish URL #{url.inspect} is not http(s)" unless @uri.is_a?(URI::HTTP)

      @secret = secret
      @sign = sign
      @timeout = timeout
    end

    # Sends `tasks` (hashes with :type and :payload, and optionally the other fields the HTTP
    # publish takes) in one request; returns the answer's `published` items in order.
    # Raises PublishError with the server's message on any answer but 202. No task, no request:
    # a POST without a body is a run, not a publish.
    def publish(tasks)
      return [] if tasks.empty?

      body = tasks.map { |task| JSON.generate(task) }.join("\n")
      headers = @sign ? @sign.call(@uri.to_s, body) : {}
      response = post(body, headers)
      answer = parse(response)
      unless response.code == "202"
        message = answer.is_a?(Hash) ? answer["message"] || answer["error"] : nil
        raise PublishError.new("event-bridge refused the publish: HTTP #{response.code}: " \
                               "#{message || response.body.to_s[0, 200]}", status: response.code.to_i)
      end
      answer.fetch("published")
    end

    private

    def post(body, headers)
      request = Net::HTTP::Post.new(@uri)
      request["Content-Type"] = "application/x-ndjson"
      request["Authorization"] = "Bearer #{@secret}" if @secret && !@secret.empty?
      headers.each { |name, value| request[name] = value }
      request.body = body
      Net::HTTP.start(@uri.host, @uri.port, use_ssl: @uri.scheme == "https",
                                            open_timeout: @timeout, read_timeout: @timeout) do |http|
        http.request(request)
      end
    rescue SystemCallError, IOError, Timeout::Error, SocketError, OpenSSL::SSL::SSLError => e
      raise PublishError, "cannot reach event-bridge at #{shown}: #{e.class}: #{e.message}"
    end

    def parse(response)
      JSON.parse(response.body.to_s)
    rescue JSON::ParserError
      nil
    end

    # The URL without credentials or query, for messages.
    def shown
      "#{@uri.scheme}://#{@uri.host}:#{@uri.port}#{@uri.path}"
    end
  end
end
