# frozen_string_literal: true

module EventBridge
  # The release this gem belongs to: event-bridge's one version, the workspace's (Cargo.toml
  # `[workspace.package] version`), which the Python and npm packages carry too.
  VERSION = "0.1.0"
end
