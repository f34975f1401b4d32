# frozen_string_literal: true

module EventBridge
  # A task's text fields as a publish takes them: a control character (C0, which takes CR, LF
  # and NUL in, or DEL) in a field a delivery sends as an HTTP header, or the queue names a
  # znode after, could never be delivered, so it is refused where it enters, naming the field;
  # so is an empty type or group. A refusal quotes at most SHOWN_BYTES of the value.
  module Fields
    TEXT = %i[id type group idempotency_key concurrency_key].freeze
    CONTROL = /[\x00-\x1f\x7f]/.freeze
    SHOWN_BYTES = 100

    module_function

    # Raises ArgumentError naming the first bad field of `task` (a Hash, symbol or string keys).
    def check!(task)
      get = ->(name) { task[name] || task[name.to_s] }
      debounce = get.call(:debounce)
      texts = TEXT.map { |name| [name, get.call(name)] }
      texts << [:debounce_key, debounce.is_a?(Hash) ? (debounce[:key] || debounce["key"]) : nil]
      texts.each do |name, value|
        next unless value.is_a?(String)

        if value.empty? && %i[type group].include?(name)
          raise ArgumentError, "'#{name}' is empty: give one of at least one character"
        end
        bad = value[CONTROL]
        next unless bad

        raise ArgumentError, format("'%s' holds a control character (U+%04X), which no header " \
                                    "or znode name can carry: %s", name, bad.ord, shown(value))
      end
      task
    end

    # `value` quoted for a message: whole when short, else its first bytes and its length.
    def shown(value)
      return value.inspect if value.bytesize <= SHOWN_BYTES

      head = value.byteslice(0, SHOWN_BYTES).scrub("")
      "#{head.inspect}… (#{value.bytesize} bytes)"
    end
  end
end
