//! The Open MPI check of `pipecast doctor`: which release the installed `coll` component was
//! compiled against (the text `pipecast-built-for-open-mpi X.Y.Z` that ffi/ompi/coll_pipecast.c
//! puts in the file) against the Open MPI installed here (`ompi_info --version`). The component
//! compiles Open MPI's struct layouts in, and disables itself under any other release.

use super::Check;
use std::path::{Path, PathBuf};

const NAME: &str = "open-mpi";
const MARKER: &[u8] = b"pipecast-built-for-open-mpi ";
const FILE: &str = "mca_coll_pipecast.so";
/// A component with the Rust library folded in is ~20 MB; refuse to read more than this.
const MAX_COMPONENT_BYTES: u64 = 512 << 20;

/// The release written after the marker in a component file's bytes.
pub fn built_for(bytes: &[u8]) -> Option<String> {
    let at = bytes.windows(MARKER.len()).position(|w| w == MARKER)? + MARKER.len();
    let rest = &bytes[at..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let text = std::str::from_utf8(&rest[..end.min(32)]).ok()?;
    let valid = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    valid.then(|| text.to_string())
}

/// `4.1.4` from `ompi_info --version`'s "Open MPI v4.1.4".
pub fn parse_ompi_info(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("Open MPI v"))?;
    let v = line.split("Open MPI v").nth(1)?.split_whitespace().next()?;
    Some(v.to_string())
}

/// Where Open MPI looks for components: `OMPI_MCA_mca_base_component_path` (its
/// `SYS_DEFAULT` keyword left out), `~/.openmpi/components`, the system directories of
/// Debian's and of source installs, and `PREFIX/lib/openmpi` beside this executable (where
/// `make -C ffi install PREFIX=…` puts it).
fn search_dirs() -> Vec<PathBuf> {
    // The MPI's own variables, read to diagnose them (an exception comm::settings lists).
    let mut dirs: Vec<PathBuf> = std::env::var("OMPI_MCA_mca_base_component_path")
        .map(|p| {
            p.split(':')
                .filter(|d| !d.is_empty() && *d != "SYS_DEFAULT")
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".openmpi/components"));
    }
    for d in [
        "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3",
        "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi",
        "/usr/local/lib/openmpi",
        "/opt/pipecast/lib/openmpi",
    ] {
        dirs.push(PathBuf::from(d));
    }
    if let Some(prefix) = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.to_path_buf()))
    {
        dirs.push(prefix.join("lib/openmpi"));
    }
    dirs
}

fn installed_release() -> Option<String> {
    let out = std::process::Command::new("ompi_info")
        .arg("--version")
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    parse_ompi_info(&String::from_utf8_lossy(&out.stdout))
}

fn read_component(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_COMPONENT_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The check: `component` names the file, else every directory Open MPI searches is looked in.
pub fn check(component: Option<&Path>) -> Check {
    let installed = installed_release();
    let found: Vec<PathBuf> = match component {
        Some(p) => vec![p.to_path_buf()],
        None => search_dirs()
            .into_iter()
            .map(|d| d.join(FILE))
            .filter(|p| p.is_file())
            .collect(),
    };
    let rebuild = "rebuild and install it against this Open MPI: `make -C ffi install` \
                   (or `make -C ffi install PREFIX=…`)";
    let Some(path) = found.first() else {
        return match installed {
            None => Check::ok(NAME, "no Open MPI here and no component: nothing to check"),
            Some(v) => Check::warn(
                NAME,
                format!("Open MPI {v} is installed but the pipecast component is not ({FILE} is in none of Open MPI's component directories)"),
                "`make -C ffi install` (into ~/.openmpi/components), or use the LD_PRELOAD shim",
            ),
        };
    };
    let built = match read_component(path) {
        Ok(bytes) => built_for(&bytes),
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot read {}: {e}", path.display()),
                "check the file's permissions, or reinstall it with `make -C ffi install`",
            )
        }
    };
    let shown = path.display();
    match (built, installed) {
        (None, _) => Check::warn(
            NAME,
            format!("{shown} does not record the Open MPI release it was built for (built before pipecast recorded it)"),
            rebuild,
        ),
        (Some(b), None) => Check::warn(
            NAME,
            format!("{shown} was built for Open MPI {b}, but ompi_info is not found here"),
            "install Open MPI (apt-get install openmpi-bin) or put its bin directory on PATH",
        ),
        (Some(b), Some(i)) if b == i => Check::ok(
            NAME,
            format!("{shown} built for Open MPI {b}, the release installed here"),
        ),
        (Some(b), Some(i)) => Check::fail(
            NAME,
            format!("{shown} was built for Open MPI {b} but Open MPI {i} is installed: the component disables itself (its struct layouts are compiled in)"),
            rebuild,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_is_read_from_the_file_bytes() {
        let mut bytes = vec![0x7f, b'E', b'L', b'F', 0, 1, 2];
        bytes.extend_from_slice(b"pipecast-built-for-open-mpi 4.1.4\0tail");
        assert_eq!(built_for(&bytes).as_deref(), Some("4.1.4"));
        assert_eq!(built_for(b"nothing here"), None);
        assert_eq!(built_for(b"pipecast-built-for-open-mpi \0"), None);
        assert_eq!(built_for(b"pipecast-built-for-open-mpi 4.x\0"), None);
        // At the very end, without a NUL.
        assert_eq!(
            built_for(b"pipecast-built-for-open-mpi 5.0.11").as_deref(),
            Some("5.0.11")
        );
    }

    #[test]
    fn ompi_info_version_parses() {
        let text = "Open MPI v4.1.4\n\nhttp://www.open-mpi.org/community/help/\n";
        assert_eq!(parse_ompi_info(text).as_deref(), Some("4.1.4"));
        assert_eq!(parse_ompi_info("mpirun (Open MPI) 5.0.3"), None);
        assert_eq!(parse_ompi_info(""), None);
    }
}
