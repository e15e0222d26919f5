//! Opening a model file that the system hands to Hearth: "Open with Hearth"
//! in a file manager runs `hearth /path/model.gguf` (the desktop entry's
//! `%F`; Windows' file association passes `"%1"` the same way). The first
//! launch opens that file instead of the last model; a later launch, which
//! the single-instance plugin turns into a callback in the running one,
//! opens it there. macOS sends an `Opened` event instead (see `lib.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The model file named on this process's own command line, if any: taken
/// at start and read once the database is open.
#[derive(Debug, Default)]
pub struct OpenAtStart(pub Option<PathBuf>);

/// The first argument after the program's name that names an existing
/// file ending in `.gguf` (any case). Flags (`-x`, `--flag`; a webview
/// driver adds some) are skipped until `--`; a relative path is taken from
/// `cwd`, the directory the launch ran in.
pub fn model_in_args<I, S>(args: I, cwd: &Path) -> Option<PathBuf>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let mut only_paths = false;
    for arg in args.into_iter().skip(1).map(Into::into) {
        if !only_paths {
            if arg == "--" {
                only_paths = true;
                continue;
            }
            if arg.to_string_lossy().starts_with('-') {
                continue;
            }
        }
        let path = cwd.join(&arg);
        if is_model_file(&path) {
            return Some(path);
        }
    }
    None
}

/// An existing file (or a link to one) whose name ends in `.gguf`, in any case.
pub fn is_model_file(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("gguf")) && path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_existing_gguf_file_after_the_program_name_is_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("Model.Q4_K_M.GGUF");
        let other = dir.path().join("other.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        std::fs::write(&other, b"GGUF").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"text").unwrap();
        std::fs::create_dir(dir.path().join("folder.gguf")).unwrap();
        let cwd = dir.path();
        let m = model.to_str().unwrap();

        assert_eq!(model_in_args(["hearth", m], cwd), Some(model.clone()), "an absolute path, upper-case extension");
        assert_eq!(
            model_in_args(["hearth", "--automation", m, other.to_str().unwrap()], cwd),
            Some(model.clone()),
            "flags skipped, the first file wins"
        );
        assert_eq!(
            model_in_args(["hearth", "other.gguf"], cwd),
            Some(other.clone()),
            "relative to the launch's directory"
        );
        assert_eq!(model_in_args(["hearth", "--", "other.gguf"], cwd), Some(other.clone()));
        assert_eq!(
            model_in_args(["hearth", "missing.gguf", "notes.txt", "folder.gguf"], cwd),
            None,
            "missing, not a model, a folder"
        );
        assert_eq!(model_in_args(["hearth"], cwd), None);
        assert_eq!(model_in_args([m], cwd), None, "the program's own name is not an argument");
        assert_eq!(model_in_args(Vec::<String>::new(), cwd), None);
    }

    #[test]
    fn a_flag_that_looks_like_a_model_is_still_a_flag() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("-x.gguf"), b"GGUF").unwrap();
        assert_eq!(model_in_args(["hearth", "-x.gguf"], dir.path()), None);
        assert_eq!(model_in_args(["hearth", "--", "-x.gguf"], dir.path()), Some(dir.path().join("-x.gguf")));
    }
}
