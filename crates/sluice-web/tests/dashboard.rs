//! Headless Chromium loads the dashboard while a job runs: the rendered graph shows every
//! operator of the job, and the records/s figures move between two loads; in a chain held back
//! by an async operator with every request slot taken, that operator is the one marked.
//!
//! Needs Debian's `chromium`: `.ci/chromium` installs it and exports `SLUICE_CHROMIUM`. Without
//! it the test skips, saying so; under CI it fails.

mod common;

use common::{OPERATORS, ci_env, records_out, running_job, wait_for, wait_for_json};
use sluice_async_io::{AsyncWait, async_fn};
use sluice_runtime::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Loads `url` in headless Chromium and returns the DOM after its scripts ran (Chromium's
/// virtual time lets the page fetch and draw before the dump; a minute at most in real time).
async fn dump_dom(chromium: &str, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox", // running as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("chromium did not finish within a minute")
        .unwrap_or_else(|e| panic!("running {chromium}: {e}"));
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed ({}): {}\n{dom}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// An attribute's value with the entities Chromium writes in attributes decoded.
fn unescape(v: &str) -> String {
    v.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The attributes of every start tag that has attribute `key`, in document order.
fn tags_with(dom: &str, key: &str) -> Vec<BTreeMap<String, String>> {
    let needle = format!(" {key}=\"");
    let mut tags = Vec::new();
    let mut from = 0;
    while let Some(i) = dom[from..].find(&needle) {
        let at = from + i;
        let start = dom[..at].rfind('<').unwrap();
        let end = at + dom[at..].find('>').unwrap();
        tags.push(attributes(&dom[start..end]));
        from = end;
    }
    tags
}

/// The `name="value"` attributes of one start tag.
fn attributes(tag: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = tag;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].rsplit(' ').next().unwrap().to_string();
        let value_start = eq + 2;
        let value_end = value_start + rest[value_start..].find('"').unwrap();
        out.insert(name, unescape(&rest[value_start..value_end]));
        rest = &rest[value_end + 1..];
    }
    out
}

/// What the dashboard shows of each vertex, by vertex id: its records/s and records out.
struct Drawn {
    rates: BTreeMap<String, f64>,
    records_out: BTreeMap<String, u64>,
    operators: BTreeSet<String>,
    sampled_at: u64,
}

fn parse(dom: &str) -> Drawn {
    let vertices = tags_with(dom, "data-vertex");
    let rates = vertices
        .iter()
        .map(|v| {
            let rate = v["data-rate"].parse::<f64>();
            let rate = rate.unwrap_or_else(|_| panic!("no rate on {v:?}"));
            (v["data-vertex"].clone(), rate)
        })
        .collect();
    let records_out = vertices
        .iter()
        .map(|v| {
            (
                v["data-vertex"].clone(),
                v["data-records-out"].parse().unwrap(),
            )
        })
        .collect();
    let operators = tags_with(dom, "data-operator")
        .into_iter()
        .map(|o| o["data-operator"].clone())
        .collect();
    let graph = tags_with(dom, "data-sampled-at");
    let sampled_at = graph[0]["data-sampled-at"].parse().unwrap();
    Drawn {
        rates,
        records_out,
        operators,
        sampled_at,
    }
}

/// The dashboard of `observer`'s job on a free port, sampled every 200 ms over a 1 s window.
async fn serve(observer: &sluice_runtime::JobObserver) -> sluice_web::WebServer {
    sluice_web::WebUi::new()
        .job(observer.clone())
        .sample_interval(Duration::from_millis(200))
        .rate_window(Duration::from_secs(1))
        .serve_dashboard("127.0.0.1:0")
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chromium_shows_every_operator_and_moving_rates() {
    let Some(chromium) = ci_env("SLUICE_CHROMIUM", "source .ci/chromium") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let observer = job.observer();
    let ui = serve(&observer).await;
    let addr = ui.local_addr();
    let path = format!("/jobs/{}", observer.job_id());
    // Rates exist once the server sampled the job twice, with records flowing.
    wait_for(&observer, "records from the source", |s| {
        records_out(s, "numbers") > 0
    })
    .await;
    wait_for_json(addr, &path, "records/s on every vertex", |job| {
        job["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["metrics"]["records-per-second"].as_f64().unwrap_or(0.0) > 0.0)
    })
    .await;

    let first = parse(&dump_dom(&chromium, &ui.url()).await);
    let status = observer.snapshot();
    assert_eq!(first.rates.len(), status.vertices.len());
    let expected: BTreeSet<String> = OPERATORS.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        first.operators, expected,
        "every operator of the job is drawn"
    );
    for (vertex, rate) in &first.rates {
        assert!(*rate > 0.0, "vertex {vertex} shows no records/s");
    }

    // The job moves on: the source emits more than the page showed, and the server samples it.
    let source = status.vertices[0].id.clone();
    let shown = first.records_out[&source];
    wait_for(&observer, "the source to emit more", |s| {
        s.vertices[0].records_out() > shown
    })
    .await;
    wait_for_json(addr, &path, "a newer sample of the rates", |job| {
        job["rates"]["sampled-at"].as_u64().unwrap() > first.sampled_at
    })
    .await;

    let second = parse(&dump_dom(&chromium, &ui.url()).await);
    assert_eq!(second.operators, expected);
    assert!(second.sampled_at > first.sampled_at);
    assert!(
        second.records_out[&source] > shown,
        "records out of the source grew"
    );
    for (vertex, rate) in &second.rates {
        assert!(*rate > 0.0, "vertex {vertex} shows no records/s");
    }
    assert_ne!(
        first.rates, second.rates,
        "the records/s figures move between two loads"
    );
    job.cancel();
    let _ = job.await;
    ui.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_operator_holding_its_chain_back_is_marked() {
    let Some(chromium) = ci_env("SLUICE_CHROMIUM", "source .ci/chromium") else {
        return;
    };
    // A source chained to a lookup of two request slots, each request 2 ms: the source could
    // emit far more, so the chain waits on the lookup nearly all the time.
    let env = StreamEnvironment::new();
    let numbers = env.from_generator(Generator::new(|i| i)).name("numbers");
    AsyncWait::new(async_fn(|x: u64| async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(Some(x))
    }))
    .timeout(Duration::from_secs(10))
    .capacity(2)
    .name("lookup")
    .apply(&numbers)
    .unwrap()
    .discard();
    let job = env.submit("held-back").unwrap();
    let observer = job.observer();
    let ui = serve(&observer).await;
    let path = format!("/jobs/{}", observer.job_id());
    let json = wait_for_json(ui.local_addr(), &path, "the lookup marked", |job| {
        job["vertices"][0]["operators"][1]["holds-back-chain"] == true
    })
    .await;
    let operators = &json["vertices"][0]["operators"];
    assert_eq!(operators.as_array().unwrap().len(), 3, "one chain: {json}");
    assert_eq!(operators[1]["name"], "lookup");
    let source_bp = operators[0]["metrics"]["backpressure-ratio"]
        .as_f64()
        .unwrap();
    let lookup_bp = operators[1]["metrics"]["backpressure-ratio"]
        .as_f64()
        .unwrap();
    assert!(source_bp > lookup_bp, "{operators}");

    let dom = dump_dom(&chromium, &ui.url()).await;
    let drawn: BTreeMap<String, BTreeMap<String, String>> = tags_with(&dom, "data-operator")
        .into_iter()
        .map(|o| (o["data-operator"].clone(), o))
        .collect();
    let holders: Vec<&str> = drawn
        .iter()
        .filter(|(_, o)| o["data-holds-back-chain"] == "true")
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(holders, ["lookup"], "{drawn:?}");
    for (name, o) in &drawn {
        let busy: f64 = o["data-busy-ratio"].parse().unwrap();
        assert!((0.0..=1.0).contains(&busy), "{name}: {o:?}");
    }
    assert!(drawn["lookup"]["title"].contains("holds its chain back"));
    job.cancel();
    let _ = job.await;
    ui.shutdown().await;
}
