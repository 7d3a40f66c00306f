//! The click events: how the generator makes them, the filters they pass, and the count that
//! passes them, worked out independently of the job for checking its output.

use rand::RngCore;
use rand_distr::{Distribution, Zipf};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Number of distinct users the generator draws from.
pub const USERS: u64 = 100_000;
/// Zipf exponent of user popularity: the higher, the more skewed.
pub const ZIPF_EXPONENT: f64 = 1.1;
/// Events arrive up to this late relative to their place in the stream.
pub const MAX_LATENESS_MS: u64 = 2_000;
/// Event time of event 0, in milliseconds since the Unix epoch (2024-01-01T00:00:00Z).
const START_MS: i64 = 1_704_067_200_000;
/// Events per millisecond of event time.
const EVENTS_PER_MS: u64 = 1_000;
/// One event in this many comes from a crawler.
const BOT_ONE_IN: u64 = 50;

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
const BROWSERS: [&str; 3] = [
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/126.0",
];

/// User agents of crawlers.
const BOTS: [&str; 2] = [
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0)",
];

/// A click as it comes out of the log, before validation.
#[derive(Clone, Debug)]
pub struct RawClick {
    user: u64,
    url: &'static str,
    user_agent: &'static str,
    timestamp_ms: i64,
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

/// Event `index` of the clickstream: derived from the index only, so every run agrees.
pub fn raw_click(index: u64, users: &Zipf<f64>) -> RawClick {
    let mut rng = SplitMix64(index);
    // Zipf samples are whole numbers from 1 up; user 0 is the most popular.
    let user = (users.sample(&mut rng) as u64).clamp(1, USERS) - 1;
    let r = rng.next_u64();
    let url = URLS[(r % URLS.len() as u64) as usize];
    let user_agent = if (r >> 8).is_multiple_of(BOT_ONE_IN) {
        BOTS[((r >> 16) % BOTS.len() as u64) as usize]
    } else {
        BROWSERS[((r >> 16) % BROWSERS.len() as u64) as usize]
    };
    let lateness = (r >> 32) % MAX_LATENESS_MS;
    let timestamp_ms = START_MS + (index / EVENTS_PER_MS) as i64 - lateness as i64;
    RawClick {
        user,
        url,
        user_agent,
        timestamp_ms,
    }
}

/// Whether a crawler made the click.
pub fn is_bot(click: &RawClick) -> bool {
    let agent = click.user_agent.as_bytes();
    agent.windows(3).any(|w| w.eq_ignore_ascii_case(b"bot"))
}

/// The click, if its url is a site path; `None` for anything else (scripts, empty urls).
pub fn parse(click: RawClick) -> Option<Click> {
    let valid = click.url.starts_with('/') && !click.url.contains(char::is_whitespace);
    valid.then_some(Click {
        user: click.user,
        timestamp_ms: click.timestamp_ms,
    })
}

/// What the filters make of the first `events` events, computed without the job.
#[derive(Debug, Default)]
pub struct Expected {
    /// Clicks dropped as crawler traffic.
    pub bots: u64,
    /// Clicks dropped for an invalid url.
    pub invalid: u64,
    /// Clicks that passed both filters, per user.
    pub per_user: FxHashMap<u64, u64>,
}

impl Expected {
    /// Runs every event through the same filters as the job.
    pub fn compute(events: u64, users: &Zipf<f64>) -> Self {
        let mut expected = Expected::default();
        for i in 0..events {
            let raw = raw_click(i, users);
            if is_bot(&raw) {
                expected.bots += 1;
            } else if let Some(click) = parse(raw) {
                *expected.per_user.entry(click.user).or_insert(0) += 1;
            } else {
                expected.invalid += 1;
            }
        }
        expected
    }

    /// Clicks that passed the filters.
    pub fn passed(&self) -> u64 {
        self.per_user.values().sum()
    }
}
