//! The click events: how the generator makes them (the lines of the click files), the filters
//! they pass, and what the job should commit, worked out independently of the job for checking
//! its output.

use rand::RngCore;
use rand_distr::{Distribution, Zipf};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};

/// Number of distinct users the generator draws from.
pub const USERS: u64 = 100_000;
/// Zipf exponent of user popularity: the higher, the more skewed.
pub const ZIPF_EXPONENT: f64 = 1.1;
/// Events arrive up to this late relative to their place in the stream.
pub const MAX_LATENESS_MS: u64 = 2_000;
/// Events per second of event time: 1,600,000 events span about 1 hour 47 minutes.
pub const EVENTS_PER_SECOND: u64 = 250;
/// Event time of event 0, in milliseconds since the Unix epoch (2024-01-01T08:00:00Z).
const START_MS: i64 = 1_704_096_000_000;
/// One event in this many comes from a crawler.
const BOT_ONE_IN: u64 = 50;
/// The length of a window, in milliseconds.
pub const MINUTE_MS: i64 = 60_000;

/// Urls as they appear in the raw log; the last two do not parse.
const URLS: [&str; 10] = [
    "/",
    "/search?q=rust+streaming",
    "/product/42",
    "/product/7",
    "/cart",
    "/checkout",
    "/blog/exactly-once",
    "/about",
    "javascript:void(0)",
    "",
];

/// User agents of human visitors.
const BROWSERS: [&str; 3] = ["Firefox/128.0", "Safari/605.1.15", "Chrome/126.0"];

/// User agents of crawlers.
const BOTS: [&str; 2] = ["Googlebot/2.1", "bingbot/2.0"];

/// The header line of every click file.
pub const CSV_HEADER: &str = "time_ms,user,url,agent";

/// A click as a line of a click file (CSV, columns in [`CSV_HEADER`]'s order), before
/// validation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RawClick {
    /// Event time, in milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// Who clicked.
    pub user: u64,
    /// What was clicked, as logged.
    pub url: String,
    /// The browser or crawler.
    pub agent: String,
}

/// A validated click of a human visitor. Serializable because the async operator stores the
/// clicks whose lookup is in flight in its checkpoints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Click {
    /// Who clicked.
    pub user: u64,
    /// Event time, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

/// The Zipf distribution of users.
pub fn user_popularity() -> Result<Zipf<f64>, rand_distr::ZipfError> {
    Zipf::new(USERS as f64, ZIPF_EXPONENT)
}

/// The per-index random stream: SplitMix64, so that event `i` is the same on every machine and
/// with every version of `rand`.
struct SplitMix64(u64);

impl RngCore for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// One generated event, borrowing its strings from the tables above.
#[derive(Clone, Copy, Debug)]
pub struct Generated {
    time_ms: i64,
    user: u64,
    url: &'static str,
    agent: &'static str,
}

impl Generated {
    /// Who clicked (the Kafka mode's record key).
    pub fn user(&self) -> u64 {
        self.user
    }

    /// The event time, in milliseconds since the Unix epoch (the Kafka mode's record
    /// timestamp).
    pub fn time_ms(&self) -> i64 {
        self.time_ms
    }

    /// Writes the event as one CSV line (no field needs quoting).
    pub fn write_csv(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(
            out,
            "{},{},{},{}",
            self.time_ms, self.user, self.url, self.agent
        )
    }
}

/// Event `index` of the clickstream: derived from the index only, so every run agrees. Events
/// come in index order at [`EVENTS_PER_SECOND`], each up to [`MAX_LATENESS_MS`] late (never
/// before event 0).
pub fn generate(index: u64, users: &Zipf<f64>) -> Generated {
    let mut rng = SplitMix64(index);
    // Zipf samples are whole numbers from 1 up; user 0 is the most popular.
    let user = (users.sample(&mut rng) as u64).clamp(1, USERS) - 1;
    let r = rng.next_u64();
    let url = URLS[(r % URLS.len() as u64) as usize];
    let agent = if (r >> 8).is_multiple_of(BOT_ONE_IN) {
        BOTS[((r >> 16) % BOTS.len() as u64) as usize]
    } else {
        BROWSERS[((r >> 16) % BROWSERS.len() as u64) as usize]
    };
    let position_ms = index * 1_000 / EVENTS_PER_SECOND;
    let lateness = ((r >> 32) % MAX_LATENESS_MS).min(position_ms);
    Generated {
        time_ms: START_MS + (position_ms - lateness) as i64,
        user,
        url,
        agent,
    }
}

fn is_bot_agent(agent: &str) -> bool {
    agent
        .as_bytes()
        .windows(3)
        .any(|w| w.eq_ignore_ascii_case(b"bot"))
}

fn is_site_path(url: &str) -> bool {
    url.starts_with('/') && !url.contains(char::is_whitespace)
}

/// Whether a crawler made the click.
pub fn is_bot(click: &RawClick) -> bool {
    is_bot_agent(&click.agent)
}

/// The click, if its url is a site path; `None` for anything else (scripts, empty urls).
pub fn parse(click: RawClick) -> Option<Click> {
    is_site_path(&click.url).then_some(Click {
        user: click.user,
        timestamp_ms: click.time_ms,
    })
}

/// The first millisecond of the minute of `time_ms` (where its 1-minute tumbling window
/// starts).
pub fn minute_of(time_ms: i64) -> i64 {
    time_ms - time_ms.rem_euclid(MINUTE_MS)
}

/// What the filters make of the first `events` events, computed without the job.
#[derive(Debug, Default)]
pub struct Expected {
    /// Clicks dropped as crawler traffic.
    pub bots: u64,
    /// Clicks dropped for an invalid url.
    pub invalid: u64,
    /// Clicks that passed both filters, per (user, first millisecond of the minute).
    pub per_minute: FxHashMap<(u64, i64), u64>,
}

impl Expected {
    /// Runs every event through the same filters as the job.
    pub fn compute(events: u64, users: &Zipf<f64>) -> Self {
        let mut expected = Expected::default();
        for i in 0..events {
            let e = generate(i, users);
            if is_bot_agent(e.agent) {
                expected.bots += 1;
            } else if is_site_path(e.url) {
                *expected
                    .per_minute
                    .entry((e.user, minute_of(e.time_ms)))
                    .or_insert(0) += 1;
            } else {
                expected.invalid += 1;
            }
        }
        expected
    }

    /// Clicks that passed the filters.
    pub fn passed(&self) -> u64 {
        self.per_minute.values().sum()
    }
}
