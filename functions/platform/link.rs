// The build script of both function crates (included by their `build.rs`).
//
// A position-independent executable is relocated by the dynamic loader at every start: the
// functions' ~59 000 relative relocations touched about 450 pages before `main`, 1.5 ms and 3 MB
// of resident memory of every cold start (`make bench`, cold start section). Linked with
// `-no-pie` the linker resolves them once, at build time. What that gives up is address
// randomization of the executable's own image (the stack, the heap and the shared libraries
// are still randomized). `EVENT_BRIDGE_PIE=1` at build time keeps the default PIE link.

fn main() {
    println!("cargo:rerun-if-env-changed=EVENT_BRIDGE_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let pie = std::env::var("EVENT_BRIDGE_PIE").is_ok_and(|v| v == "1");
    if linux && !pie {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
