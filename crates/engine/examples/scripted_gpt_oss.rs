//! Writes the made gpt-oss file the tests use (real architecture,
//! vocabulary and template; built weights that write one Harmony reply
//! whatever they are asked), for the end-to-end tests of the app:
//!
//!     cargo run -p hearth-engine --example scripted_gpt_oss -- OUT.gguf ["THINKING" "ANSWER"]
//!
//! `cargo test` builds it as `target/debug/examples/scripted_gpt_oss`.

#[path = "../tests/common/o200k.rs"]
#[allow(dead_code, reason = "this example uses part of the shared vocabulary helper")]
mod o200k;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (out, thinking, answer) = match args.as_slice() {
        [out] => (out, "The user says hi.", "Hello! How can I help?"),
        [out, thinking, answer] => (out, thinking.as_str(), answer.as_str()),
        _ => {
            eprintln!("usage: scripted_gpt_oss OUT.gguf [THINKING ANSWER]");
            std::process::exit(2);
        }
    };
    o200k::write_scripted_gpt_oss(std::path::Path::new(out), thinking, answer);
}
