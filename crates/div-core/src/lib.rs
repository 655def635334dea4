//! One call per div user action, composing spec, pricing, shipping and the control-plane client; emits events, prints nothing.
