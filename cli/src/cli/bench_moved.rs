//! `oncelake bench ...` and `oncelake table bench ...`: the benchmarks left this binary (it links
//! none of their baselines); the command says where they are, with the same arguments.

use super::CliError;
use std::ffi::OsString;

/// Whatever followed `bench`, kept to repeat it in the message.
#[derive(clap::Args, Debug)]
pub(crate) struct MovedArgs {
    /// The benchmark and its flags, as `oncelake-bench` takes them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// `oncelake bench KIND ARGS...`: exit 2 with the command to run instead.
pub(crate) fn run(a: MovedArgs) -> Result<u8, CliError> {
    Err(moved("", &a.args))
}

/// The usage error naming `oncelake-bench {sub} ARGS...` (`sub` for `table bench` → `table`).
pub(crate) fn moved(sub: &str, args: &[OsString]) -> CliError {
    let mut words: Vec<String> = vec!["oncelake-bench".into()];
    if !sub.is_empty() {
        words.push(sub.into());
    }
    words.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
    let command = if words.len() == 1 {
        "oncelake-bench --help".to_string()
    } else {
        words.join(" ")
    };
    CliError::Usage(format!(
        "the benchmarks moved to their own binary, with the same subcommands and flags: run \
         `{command}` (build it with `cargo build --release -p oncelake-bench`; it finds this \
         `oncelake` beside it, or set ONCELAKE_BIN)"
    ))
}
