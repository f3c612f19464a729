//! The Python client and the torchx scheduler (`python/`): their pytest suite, which starts a
//! real head and agents of this build and drives them through the client and the `torchx` CLI.
//!
//! It needs a Python whose environment has the `ftdrive` package, pytest and torchx:
//! `FTDRIVE_TEST_PYTHON=/path/to/venv/bin/python`. Without it the test says it was skipped and
//! passes; with `FTDRIVE_REQUIRE_PYTHON=1` a missing or incomplete Python fails it.

use std::path::Path;
use std::process::Command;

/// The Python to run the suite with, or why the test cannot run.
fn python_with_packages() -> Result<String, String> {
    let python = std::env::var("FTDRIVE_TEST_PYTHON").map_err(|_| {
        "FTDRIVE_TEST_PYTHON is not set (a Python with ./python, pytest and torchx installed)".to_string()
    })?;
    let probe = Command::new(&python).args(["-c", "import ftdrive, pytest, torchx"]).output();
    match probe {
        Ok(out) if out.status.success() => Ok(python),
        Ok(out) => Err(format!(
            "{python} lacks a package: {}; run `{python} -m pip install pytest torchx ./python`",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run {python}: {e}")),
    }
}

#[test]
fn the_python_client_and_torchx_scheduler_pass_their_tests() {
    let python = match python_with_packages() {
        Ok(python) => python,
        Err(why) if std::env::var_os("FTDRIVE_REQUIRE_PYTHON").is_some_and(|v| v == "1") => panic!("{why}"),
        Err(why) => {
            eprintln!("python client test SKIPPED: {why}");
            return;
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"])
        .current_dir(&root)
        .env("FTDRIVE_BIN", env!("CARGO_BIN_EXE_ftdrive"))
        // This tree's package, not whichever copy was installed last (torchx finds the
        // scheduler by the installed entry point, which then imports it from here).
        .env("PYTHONPATH", root.join("python"))
        .output()
        .expect("pytest runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pytest python/tests failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("python client tests: {}", stdout.trim().lines().last().unwrap_or_default());
}
