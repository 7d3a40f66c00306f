//! Driving the Java side: Apache Flink 2.3.0 from PyPI's `apache-flink==2.3.0` in
//! `target/flink-venv` (or `$FLINK_VENV`), installed on first use as
//! `flink/run_async_flink.sh` does; `flink/NexmarkFlink.java` compiled with `javac --release 17`
//! against the jars of `pyflink/lib` (the table planner loader, the table runtime, the files
//! connector and `flink-json` are all there); each run a fresh JVM (`java -Xmx2g` with Flink's
//! usual `--add-opens` flags) that runs one query in a local MiniCluster and prints one JSON
//! line, parsed into a [`Probe`].

use super::Probe;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const FLINK_VERSION: &str = "2.3.0";

const JAVA_FLAGS: [&str; 16] = [
    "-Xmx2g",
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.time=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED",
];

/// A Flink installation with a bench class (`NexmarkFlink`, `LargeStateFlink`) compiled
/// against it.
pub struct Flink {
    lib: PathBuf,
    classes: PathBuf,
    logs: PathBuf,
}

fn run_checked(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("starting {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// `pyflink/lib` under `venv`, if Flink is installed there.
fn find_lib(venv: &Path) -> Option<PathBuf> {
    let libs = std::fs::read_dir(venv.join("lib")).ok()?;
    libs.filter_map(Result::ok)
        .map(|python| python.path().join("site-packages/pyflink/lib"))
        .find(|lib| {
            lib.join(format!("flink-dist-{FLINK_VERSION}.jar"))
                .is_file()
        })
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Flink {
    /// Finds (or installs) Flink and compiles `NexmarkFlink.java` into `work/classes` when the
    /// source is newer than its class.
    pub fn prepare(target: &Path, work: &Path) -> anyhow::Result<Flink> {
        Self::prepare_class(target, work, "NexmarkFlink")
    }

    /// Finds (or installs) Flink and compiles `flink/<class>.java` into `work/classes` when the
    /// source is newer than its class.
    pub fn prepare_class(target: &Path, work: &Path, class_name: &str) -> anyhow::Result<Flink> {
        let venv = std::env::var_os("FLINK_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| target.join("flink-venv"));
        let lib = match find_lib(&venv) {
            Some(lib) => lib,
            None => {
                eprintln!(
                    "... installing apache-flink=={FLINK_VERSION} from PyPI into {} (~350 MB, a \
                     few minutes)",
                    venv.display()
                );
                if !venv.join("bin/pip").is_file() {
                    run_checked(
                        Command::new("python3").arg("-m").arg("venv").arg(&venv),
                        "python3 -m venv",
                    )?;
                }
                run_checked(
                    Command::new(venv.join("bin/pip"))
                        .arg("install")
                        .arg("-q")
                        .arg(format!("apache-flink=={FLINK_VERSION}")),
                    "pip install apache-flink",
                )?;
                find_lib(&venv).with_context(|| {
                    format!(
                        "flink-dist-{FLINK_VERSION}.jar not found under {}",
                        venv.display()
                    )
                })?
            }
        };
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("flink/{class_name}.java"));
        let classes = work.join("classes");
        let class = classes.join(format!("{class_name}.class"));
        if modified(&class).is_none_or(|c| modified(&source).is_none_or(|s| s > c)) {
            eprintln!("... compiling {}", source.display());
            std::fs::create_dir_all(&classes)
                .with_context(|| format!("creating {}", classes.display()))?;
            run_checked(
                Command::new("javac")
                    .args(["--release", "17", "-cp"])
                    .arg(format!("{}/*", lib.display()))
                    .arg("-d")
                    .arg(&classes)
                    .arg(&source),
                &format!("javac {class_name}.java"),
            )?;
        }
        let logs = work.join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        Ok(Flink { lib, classes, logs })
    }

    /// A `java` command with Flink's flags and class path that runs `class_name`.
    pub fn java(&self, class_name: &str) -> Command {
        let mut cmd = Command::new("java");
        cmd.args(JAVA_FLAGS)
            .arg("-cp")
            .arg(format!(
                "{}:{}/*",
                self.classes.display(),
                self.lib.display()
            ))
            .arg(class_name);
        cmd
    }

    /// Where the JVMs' logs go.
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// `java -version`'s first line.
    pub fn java_version() -> String {
        Command::new("java")
            .arg("-version")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "java not found".into())
    }

    /// Runs `query` at `parallelism` over the events in `events` in a fresh JVM, writing the
    /// rows into `out`.
    pub fn run(
        &self,
        query: &str,
        parallelism: usize,
        events: &Path,
        out: &Path,
    ) -> anyhow::Result<Probe> {
        let log = self.logs.join(format!("flink-{query}-p{parallelism}.log"));
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let start = Instant::now();
        let output = self
            .java("NexmarkFlink")
            .arg("--events")
            .arg(events)
            .arg("--query")
            .arg(query)
            .arg("--parallelism")
            .arg(parallelism.to_string())
            .arg("--out")
            .arg(out)
            .stderr(stderr)
            .output()
            .context("starting java")?;
        let wall = start.elapsed();
        if !output.status.success() {
            bail!(
                "Flink {query} at parallelism {parallelism} failed ({}); see {}",
                output.status,
                log.display()
            );
        }
        let mut probe = Probe::parse(&output.stdout)
            .with_context(|| format!("Flink {query}: see {}", log.display()))?;
        probe.wall_s = wall.as_secs_f64();
        Ok(probe)
    }
}
