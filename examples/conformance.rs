//! Conformance runner (docs/spec/CONFORMANCE.md): reads a case file and
//! prints the result document (pretty JSON) on stdout.
//!
//! ```text
//! cargo run --release --example conformance -- CASE.json [--backend cpu|cuda|auto]
//! ```
//!
//! Exit 0 with the document even when some request has an error status;
//! non-zero (2) with a message naming the field only when the case file
//! itself cannot be read or run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sampler_host::conformance::case::{exit_code, run_case_str};
use sampler_host::BackendKind;

#[derive(Parser, Debug)]
#[command(about = "Run one conformance case and print its result document")]
struct Args {
    /// The case file (JSON).
    case: PathBuf,
    /// Backend: cpu, cuda or auto.
    #[arg(long, default_value = "cpu")]
    backend: BackendKind,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let text = match std::fs::read_to_string(&args.case) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("conformance: cannot read case file {}: {e}", args.case.display());
            return ExitCode::from(2);
        }
    };
    let res = run_case_str(&text, args.backend);
    match &res {
        Ok(doc) => match serde_json::to_string_pretty(doc) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("conformance: cannot write the result document: {e}");
                return ExitCode::from(1);
            }
        },
        Err(e) => eprintln!("conformance: {}: {e}", args.case.display()),
    }
    ExitCode::from(exit_code(&res) as u8)
}
