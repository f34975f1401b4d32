# frozen_string_literal: true

require "base64"
require "openssl"

module EventBridge
  # Checks a Standard Webhooks signature (https://www.standardwebhooks.com/), as the HTTP
  # sink sends it with a route's `"signature": "standard"`: `webhook-signature` holds one or
  # more space-separated `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`,
  # keyed with the bytes the secret's base64 after `whsec_` stands for.
  class WebhookSignature
    # How far `webhook-timestamp` may be from this clock, either way (the spec's 5 minutes).
    TOLERANCE_SECONDS = 5 * 60

    def initialize(secret, tolerance: TOLERANCE_SECONDS)
      encoded = secret.to_s.delete_prefix("whsec_")
      raise ArgumentError, "a Standard Webhooks secret is whsec_ and base64" if encoded == secret.to_s

      @key = begin
        Base64.strict_decode64(encoded)
      rescue ArgumentError
        raise ArgumentError, "a Standard Webhooks secret is whsec_ and base64"
      end
      raise ArgumentError, "a Standard Webhooks secret's key is empty" if @key.empty?

      @tolerance = tolerance
    end

    # nil when the request is genuine, else why not (for the 401's body; never the expected
    # signature).
    def problem(id:, timestamp:, signature:, body:, now: Time.now.to_i)
      return "missing webhook-id, webhook-timestamp or webhook-signature" if [id, timestamp, signature].any? { |h| h.nil? || h.empty? }
      return "webhook-timestamp is not a number of seconds" unless timestamp.match?(/\A\d{1,12}\z/)
      return "webhook-timestamp is more than #{@tolerance} s away" if (now - timestamp.to_i).abs > @tolerance

      signed = [id, timestamp, body].map { |part| part.to_s.b }.join(".")
      expected = "v1,#{Base64.strict_encode64(OpenSSL::HMAC.digest('SHA256', @key, signed))}"
      matched = signature.split(" ").map { |given| same?(given, expected) }.any?
      matched ? nil : "no signature matches"
    end

    private

    # Constant time for strings of one length (every v1 signature has the same length).
    def same?(given, expected)
      given.bytesize == expected.bytesize && OpenSSL.fixed_length_secure_compare(given, expected)
    end
  end
end
