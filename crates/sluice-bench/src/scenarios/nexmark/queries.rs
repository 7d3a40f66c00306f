//! The Nexmark queries in sluice, one function each, written as a user of the DataStream API
//! would write them. Each takes the stream of [`Event`]s read from the events file (with event
//! time and watermarks 4 s behind, as the Nexmark SQL's `WATERMARK FOR dateTime AS dateTime -
//! INTERVAL '4' SECOND`) and returns the stream of result rows, as tuples in the column order of
//! the Nexmark SQL's `SELECT` (times in epoch milliseconds), so that both engines' rows can be
//! compared. `docs/nexmark.md` shows the same functions.
//!
//! The windowed queries hand their windows to [`Lateness::watch`], which keeps the window
//! operator's count of records dropped as late: the events are in event-time order, so it must
//! stay at zero, and the probe reports it.
//!
//! The join queries (q3, q4, q8, q9) connect two keyed streams and match them in a
//! [`KeyedCoProcessFunction`], with per-key state and event-time timers: the runtime's
//! `connect`. Their results are final when the watermark passes the end of what can still
//! match (an auction's `expires`, a window's end), which holds because no record is late.

use super::model::{Auction, Bid, Event, Person};
use serde::{Deserialize, Serialize};
use sluice::WindowedStream;
use sluice::prelude::*;
use sluice::process::{Context, KeyedCoProcessFunction, KeyedProcessFunction};
use sluice::window::{
    AggregateFunction, EventTimeSessionWindows, LateRecordsDropped, SlidingEventTimeWindows,
    TimeWindow, TumblingEventTimeWindows, TumblingProcessingTimeWindows,
};
use std::cell::RefCell;
use std::time::Duration;

/// The queries sluice runs, in the order the report lists them.
pub const QUERIES: [&str; 11] = [
    "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11", "q12",
];

/// The queries whose sluice result is an upsert stream: a new row per key replaces the last
/// one (the key is the first column).
pub const UPSERTS: [&str; 1] = ["q4"];

/// The late-record counters of a query's windows.
#[derive(Default)]
pub struct Lateness(RefCell<Vec<LateRecordsDropped>>);

impl Lateness {
    /// Keeps the count of records `windows` drops as late, and hands it back.
    pub fn watch<T, K, F>(&self, windows: WindowedStream<T, K, F>) -> WindowedStream<T, K, F>
    where
        T: Data,
        K: sluice::process::StateKey,
        F: Fn(&T) -> K + Clone + Send + 'static,
    {
        self.0.borrow_mut().push(windows.late_records_dropped());
        windows
    }

    /// Records dropped as late by all watched windows so far.
    pub fn dropped(&self) -> u64 {
        self.0.borrow().iter().map(LateRecordsDropped::get).sum()
    }
}

/// The bids of the event stream (the Nexmark `bid` view).
pub fn bids(events: &DataStream<Event>) -> DataStream<Bid> {
    events.flat_map(|e: Event| e.bid)
}

/// The persons of the event stream (the Nexmark `person` view).
pub fn persons(events: &DataStream<Event>) -> DataStream<Person> {
    events.flat_map(|e: Event| e.person)
}

/// The auctions of the event stream (the Nexmark `auction` view).
pub fn auctions(events: &DataStream<Event>) -> DataStream<Auction> {
    events.flat_map(|e: Event| e.auction)
}

/// Counts the records of a window.
#[derive(Clone)]
pub struct CountAll;

impl<T> AggregateFunction<T> for CountAll {
    type Acc = u64;
    type Out = u64;

    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: T, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

/// q0, pass-through: `SELECT auction, bidder, price, dateTime, extra FROM bid`.
pub fn q0(events: &DataStream<Event>) -> DataStream<(u64, u64, u64, i64, String)> {
    bids(events).map(|b: Bid| (b.auction, b.bidder, b.price, b.date_time, b.extra))
}

/// q1, currency conversion: the bids with their price in euros (`0.908 * price`).
pub fn q1(events: &DataStream<Event>) -> DataStream<(u64, u64, f64, i64, String)> {
    bids(events).map(|b: Bid| {
        let euros = b.price as f64 * 0.908;
        (b.auction, b.bidder, euros, b.date_time, b.extra)
    })
}

/// q2, selection: `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`.
pub fn q2(events: &DataStream<Event>) -> DataStream<(u64, u64)> {
    bids(events)
        .filter(|b: &Bid| b.auction.is_multiple_of(123))
        .map(|b: Bid| (b.auction, b.price))
}

/// One auction's bid count in one sliding window (q5's inner query).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuctionBids {
    /// The auction.
    pub auction: u64,
    /// The window's end (the window is `[end - 10 s, end)`).
    pub window_end: i64,
    /// Bids on the auction in the window.
    pub num: u64,
}

/// Keeps the auctions with the highest count of a window.
#[derive(Clone)]
pub struct Hottest;

impl AggregateFunction<AuctionBids> for Hottest {
    /// The highest count so far and the auctions that have it.
    type Acc = (u64, Vec<u64>);
    type Out = (u64, Vec<u64>);

    fn create_accumulator(&self) -> Self::Acc {
        (0, Vec::new())
    }
    fn add(&self, c: AuctionBids, acc: &mut Self::Acc) {
        if c.num > acc.0 {
            *acc = (c.num, vec![c.auction]);
        } else if c.num == acc.0 {
            acc.1.push(c.auction);
        }
    }
    fn get_result(&self, acc: &Self::Acc) -> Self::Out {
        acc.clone()
    }
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc {
        match a.0.cmp(&b.0) {
            std::cmp::Ordering::Greater => a,
            std::cmp::Ordering::Less => b,
            std::cmp::Ordering::Equal => (a.0, [a.1, b.1].concat()),
        }
    }
}

/// q5, hot items: in sliding windows of 10 s every 2 s, the auctions with the most bids.
/// Rows `(auction, num)`, one per hottest auction and window.
pub fn q5(events: &DataStream<Event>, late: &Lateness) -> DataStream<(u64, u64)> {
    let window = SlidingEventTimeWindows::of(Duration::from_secs(10), Duration::from_secs(2));
    let counts = late
        .watch(bids(events).key_by(|b: &Bid| b.auction).window(window))
        .aggregate_with(CountAll, |auction: &u64, w: &TimeWindow, num| AuctionBids {
            auction: *auction,
            window_end: w.end,
            num,
        });
    // A window's counts carry its last millisecond as their event time, so the 2 s tumbling
    // window they fall in holds the counts of that one sliding window.
    let per_window = TumblingEventTimeWindows::of(Duration::from_secs(2));
    late.watch(
        counts
            .key_by(|c: &AuctionBids| c.window_end)
            .window(per_window),
    )
    .aggregate(Hottest)
    .flat_map(|(num, auctions): (u64, Vec<u64>)| {
        auctions.into_iter().map(move |auction| (auction, num))
    })
}

/// Keeps the bids with the highest price of a window.
#[derive(Clone)]
pub struct HighestBids;

impl AggregateFunction<Bid> for HighestBids {
    type Acc = Vec<Bid>;
    type Out = Vec<Bid>;

    fn create_accumulator(&self) -> Vec<Bid> {
        Vec::new()
    }
    fn add(&self, b: Bid, acc: &mut Vec<Bid>) {
        match acc.first().map(|top| b.price.cmp(&top.price)) {
            None | Some(std::cmp::Ordering::Equal) => acc.push(b),
            Some(std::cmp::Ordering::Greater) => *acc = vec![b],
            Some(std::cmp::Ordering::Less) => {}
        }
    }
    fn get_result(&self, acc: &Vec<Bid>) -> Vec<Bid> {
        acc.clone()
    }
    fn merge(&self, mut a: Vec<Bid>, b: Vec<Bid>) -> Vec<Bid> {
        for bid in b {
            self.add(bid, &mut a);
        }
        a
    }
}

/// q7, highest bid: the bids with the highest price of each 10 s tumbling window, as rows
/// `(auction, price, bidder, dateTime, extra)`.
///
/// The Nexmark SQL joins each window's maximum back to the bids `BETWEEN window_end - 10 s AND
/// window_end`, both ends included, so a bid at exactly `window_end` (the next window's first
/// millisecond) with the same price would match too; here a bid belongs to its own window only.
/// The comparison with Flink shows whether such a bid occurred.
pub fn q7(events: &DataStream<Event>, late: &Lateness) -> DataStream<(u64, u64, u64, i64, String)> {
    let window = TumblingEventTimeWindows::of(Duration::from_secs(10));
    late.watch(bids(events).key_by(|_: &Bid| ()).window(window))
        .aggregate(HighestBids)
        .flat_map(|top: Vec<Bid>| {
            top.into_iter()
                .map(|b| (b.auction, b.price, b.bidder, b.date_time, b.extra))
        })
}

/// q11, user sessions: bids per bidder in session windows closed by 10 s without a bid, rows
/// `(bidder, bid_count, starttime, endtime)` (the end is the last bid's time + 10 s, as
/// `SESSION_END` has it).
pub fn q11(events: &DataStream<Event>, late: &Lateness) -> DataStream<(u64, u64, i64, i64)> {
    let sessions = EventTimeSessionWindows::with_gap(Duration::from_secs(10));
    late.watch(bids(events).key_by(|b: &Bid| b.bidder).window(sessions))
        .aggregate_with(CountAll, |bidder: &u64, w: &TimeWindow, n| {
            (*bidder, n, w.start, w.end)
        })
        .main()
}

/// q12, processing-time windows: bids per bidder in 10 s tumbling windows of processing time,
/// rows `(bidder, bid_count, starttime, endtime)`. Which bids share a window depends on when
/// each engine reads them, so the two engines' rows cannot be compared.
pub fn q12(events: &DataStream<Event>) -> DataStream<(u64, u64, i64, i64)> {
    let window = TumblingProcessingTimeWindows::of(Duration::from_secs(10));
    bids(events)
        .key_by(|b: &Bid| b.bidder)
        .window(window)
        .aggregate_with(CountAll, |bidder: &u64, w: &TimeWindow, n| {
            (*bidder, n, w.start, w.end)
        })
        .main()
}

/// What q3 keeps per person id: the person once seen, and the auctions that came first.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Seller {
    /// (name, city, state).
    person: Option<(String, String, String)>,
    /// Auction ids seen before their seller.
    waiting: Vec<u64>,
}

/// Matches persons with the auctions they sell, whichever arrives first.
#[derive(Clone)]
pub struct SellerAuctions;

impl KeyedCoProcessFunction<u64, Person, Auction> for SellerAuctions {
    type Out = (String, String, String, u64);
    type State = Seller;

    fn process_element1(
        &mut self,
        p: Person,
        ctx: &mut Context<'_, u64, Seller, Self::Out>,
    ) -> Result<(), UserError> {
        let seller = ctx.state();
        let waiting = std::mem::take(&mut seller.waiting);
        seller.person = Some((p.name.clone(), p.city.clone(), p.state.clone()));
        for id in waiting {
            ctx.collect((p.name.clone(), p.city.clone(), p.state.clone(), id));
        }
        Ok(())
    }

    fn process_element2(
        &mut self,
        a: Auction,
        ctx: &mut Context<'_, u64, Seller, Self::Out>,
    ) -> Result<(), UserError> {
        match ctx.state().person.clone() {
            Some((name, city, state)) => ctx.collect((name, city, state, a.id)),
            None => ctx.state().waiting.push(a.id),
        }
        Ok(())
    }
}

/// q3, local item suggestion: persons in Oregon, Idaho or California with the auctions of
/// category 10 they sell, rows `(name, city, state, auction id)`.
pub fn q3(events: &DataStream<Event>) -> DataStream<(String, String, String, u64)> {
    let sellers = persons(events)
        .filter(|p: &Person| matches!(p.state.as_str(), "OR" | "ID" | "CA"))
        .key_by(|p: &Person| p.id);
    let category_10 = auctions(events)
        .filter(|a: &Auction| a.category == 10)
        .key_by(|a: &Auction| a.seller);
    sellers.connect(&category_10).process(SellerAuctions).main()
}

/// What [`WinningBid`] keeps per auction id.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Bidding {
    /// The auction once seen.
    auction: Option<Auction>,
    /// The best bid so far between the auction's start and its expiry.
    best: Option<Bid>,
    /// Bids that came before their auction.
    early: Vec<Bid>,
}

impl Bidding {
    /// Takes `b` if it falls within the auction and beats the best bid: a higher price, or
    /// the same price earlier (q9's `ORDER BY price DESC, dateTime ASC`).
    fn offer(&mut self, b: Bid) {
        let Some(a) = &self.auction else {
            self.early.push(b);
            return;
        };
        if b.date_time < a.date_time || b.date_time > a.expires {
            return;
        }
        let better = self.best.as_ref().is_none_or(|best| {
            b.price > best.price || (b.price == best.price && b.date_time < best.date_time)
        });
        if better {
            self.best = Some(b);
        }
    }
}

/// Each auction's winning bid, emitted when the watermark passes the auction's expiry.
#[derive(Clone)]
pub struct WinningBid;

impl KeyedCoProcessFunction<u64, Auction, Bid> for WinningBid {
    type Out = (Auction, Bid);
    type State = Bidding;

    fn process_element1(
        &mut self,
        a: Auction,
        ctx: &mut Context<'_, u64, Bidding, Self::Out>,
    ) -> Result<(), UserError> {
        ctx.timer_service().register_event_time_timer(a.expires);
        let bidding = ctx.state();
        bidding.auction = Some(a);
        for b in std::mem::take(&mut bidding.early) {
            bidding.offer(b);
        }
        Ok(())
    }

    fn process_element2(
        &mut self,
        b: Bid,
        ctx: &mut Context<'_, u64, Bidding, Self::Out>,
    ) -> Result<(), UserError> {
        ctx.state().offer(b);
        Ok(())
    }

    fn on_timer(
        &mut self,
        _expires: i64,
        ctx: &mut Context<'_, u64, Bidding, Self::Out>,
    ) -> Result<(), UserError> {
        let bidding = std::mem::take(ctx.state());
        ctx.clear_state();
        if let (Some(a), Some(b)) = (bidding.auction, bidding.best) {
            ctx.collect((a, b));
        }
        Ok(())
    }
}

/// The winning bid of every auction that had a bid between its start and its expiry.
pub fn winning_bids(events: &DataStream<Event>) -> DataStream<(Auction, Bid)> {
    let auctions = auctions(events).key_by(|a: &Auction| a.id);
    let bids = bids(events).key_by(|b: &Bid| b.auction);
    auctions.connect(&bids).process(WinningBid).main()
}

/// The running average of the closing prices per category.
#[derive(Clone)]
pub struct AveragePrice;

impl KeyedProcessFunction<u64, (u64, u64)> for AveragePrice {
    type Out = (u64, u64);
    /// (sum of closing prices, auctions).
    type State = (u64, u64);

    fn process_element(
        &mut self,
        (category, price): (u64, u64),
        ctx: &mut Context<'_, u64, (u64, u64), Self::Out>,
    ) -> Result<(), UserError> {
        let (sum, n) = ctx.state();
        *sum += price;
        *n += 1;
        let average = *sum / *n;
        ctx.collect((category, average));
        Ok(())
    }
}

/// q4, average closing price per category: each auction closes at its highest bid between its
/// start and its expiry; rows `(category, average)`, a new row per category whenever one of
/// its auctions closes (the last row per category is the result; the average is an integer, as
/// the SQL's `AVG` of a `BIGINT`).
pub fn q4(events: &DataStream<Event>) -> DataStream<(u64, u64)> {
    winning_bids(events)
        .map(|(a, b): (Auction, Bid)| (a.category, b.price))
        .key_by(|c: &(u64, u64)| c.0)
        .process_keyed(AveragePrice)
        .main()
}

/// q9's row: the auction's columns then the winning bid's (`id, itemName, description,
/// initialBid, reserve, dateTime, expires, seller, category, extra, auction, bidder, price,
/// bid_dateTime, bid_extra`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WinningBidRow(
    u64,
    String,
    String,
    u64,
    u64,
    i64,
    i64,
    u64,
    u64,
    String,
    u64,
    u64,
    u64,
    i64,
    String,
);

/// q9, winning bids: every auction with the bid that won it.
pub fn q9(events: &DataStream<Event>) -> DataStream<WinningBidRow> {
    winning_bids(events).map(|(a, b): (Auction, Bid)| {
        WinningBidRow(
            a.id,
            a.item_name,
            a.description,
            a.initial_bid,
            a.reserve,
            a.date_time,
            a.expires,
            a.seller,
            a.category,
            a.extra,
            b.auction,
            b.bidder,
            b.price,
            b.date_time,
            b.extra,
        )
    })
}

const TEN_SECONDS: i64 = 10_000;

/// The start of the 10 s tumbling window holding `t`.
fn window_of(t: i64) -> i64 {
    t - t.rem_euclid(TEN_SECONDS)
}

/// What q8 keeps per person id.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NewSeller {
    /// The person's name and the start of the window it registered in.
    person: Option<(String, i64)>,
    /// Windows in which the person opened an auction, before the person was seen.
    auction_windows: Vec<i64>,
    /// Whether the person was reported.
    reported: bool,
}

/// Persons who opened an auction in the 10 s window they registered in.
#[derive(Clone)]
pub struct NewSellers;

impl KeyedCoProcessFunction<u64, Person, Auction> for NewSellers {
    type Out = (u64, String, i64);
    type State = NewSeller;

    fn process_element1(
        &mut self,
        p: Person,
        ctx: &mut Context<'_, u64, NewSeller, Self::Out>,
    ) -> Result<(), UserError> {
        let window = window_of(p.date_time);
        ctx.timer_service()
            .register_event_time_timer(window + TEN_SECONDS - 1);
        let seller = ctx.state();
        seller.person = Some((p.name.clone(), window));
        if seller.auction_windows.contains(&window) && !seller.reported {
            seller.reported = true;
            ctx.collect((p.id, p.name, window));
        }
        Ok(())
    }

    fn process_element2(
        &mut self,
        a: Auction,
        ctx: &mut Context<'_, u64, NewSeller, Self::Out>,
    ) -> Result<(), UserError> {
        let window = window_of(a.date_time);
        let seller = ctx.state();
        match &seller.person {
            Some((_, w)) if *w == window && seller.reported => {}
            Some((name, w)) if *w == window => {
                seller.reported = true;
                let name = name.clone();
                ctx.collect((a.seller, name, window));
            }
            _ if !seller.auction_windows.contains(&window) => {
                seller.auction_windows.push(window);
                ctx.timer_service()
                    .register_event_time_timer(window + TEN_SECONDS - 1);
            }
            _ => {}
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        t: i64,
        ctx: &mut Context<'_, u64, NewSeller, Self::Out>,
    ) -> Result<(), UserError> {
        // Windows that ended can no longer match.
        let seller = ctx.state();
        seller.auction_windows.retain(|w| w + TEN_SECONDS - 1 > t);
        if seller
            .person
            .as_ref()
            .is_some_and(|(_, w)| w + TEN_SECONDS - 1 <= t)
        {
            seller.person = None;
        }
        if seller.person.is_none() && seller.auction_windows.is_empty() {
            ctx.clear_state();
        }
        Ok(())
    }
}

/// q8, monitor new users: persons who opened an auction in the same 10 s tumbling window they
/// registered in, rows `(id, name, window start)`.
pub fn q8(events: &DataStream<Event>) -> DataStream<(u64, String, i64)> {
    let persons = persons(events).key_by(|p: &Person| p.id);
    let sellers = auctions(events).key_by(|a: &Auction| a.seller);
    persons.connect(&sellers).process(NewSellers).main()
}
