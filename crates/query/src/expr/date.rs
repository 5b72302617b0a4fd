//! Date operators. Time zones: UTC, fixed offsets ("+05:30", "-0800", "Z", "UTC", "GMT") and
//! IANA names ("America/New_York") from the database chrono-tz compiles in; an unknown name
//! raises 40485 as mongod does.

use super::num;
use super::util::{nullish, show, type_name, type_name_opt};
use crate::compare::is_number;
use crate::error::{Error, Result};
use bson::{doc, Bson};
use chrono::{
    DateTime, Datelike, Duration, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, Offset,
    TimeZone, Timelike, Utc,
};

const CONVERSION_FAILURE: i32 = 241;

/// Milliseconds since the epoch of a date-like value (date, timestamp, ObjectId).
pub fn to_millis(v: &Bson) -> Result<i64> {
    match v {
        Bson::DateTime(d) => Ok(d.timestamp_millis()),
        Bson::Timestamp(t) => Ok(t.time as i64 * 1000),
        Bson::ObjectId(o) => Ok(o.timestamp().timestamp_millis()),
        other => Err(Error::location(
            16006,
            format!("can't convert from BSON type {} to Date", type_name(other)),
        )),
    }
}

/// A `timezone` argument: a fixed offset east of UTC, or an IANA zone whose offset
/// depends on the instant (daylight-saving time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Zone {
    Fixed(i32),
    Named(chrono_tz::Tz),
}

/// UTC, the zone of a date expression without `timezone`.
const UTC_ZONE: Zone = Zone::Fixed(0);

/// How far before a local time that falls in a daylight-saving gap to look for the
/// offset in force before the gap (no zone has a gap longer than a day).
const GAP_LOOKBACK_HOURS: i64 = 24;

impl Zone {
    /// Seconds east of UTC in force at the instant `ms`.
    fn offset_at(self, ms: i64) -> i32 {
        match self {
            Zone::Fixed(o) => o,
            Zone::Named(tz) => match Utc.timestamp_millis_opt(ms).single() {
                Some(utc) => tz
                    .offset_from_utc_datetime(&utc.naive_utc())
                    .fix()
                    .local_minus_utc(),
                None => 0,
            },
        }
    }

    /// The instant (ms since the epoch) of a local wall-clock time. An ambiguous time
    /// (the repeated hour when clocks go back) takes the earlier instant; a time in the
    /// gap when clocks go forward takes the offset in force before the gap, landing the
    /// same distance past the gap's end.
    fn to_utc_millis(self, local: NaiveDateTime) -> i64 {
        let wall = local.and_utc().timestamp_millis();
        let off = match self {
            Zone::Fixed(o) => o,
            Zone::Named(tz) => match tz.offset_from_local_datetime(&local) {
                LocalResult::Single(o) => o.fix().local_minus_utc(),
                LocalResult::Ambiguous(a, b) => {
                    a.fix().local_minus_utc().max(b.fix().local_minus_utc())
                }
                LocalResult::None => self.offset_at(wall - GAP_LOOKBACK_HOURS * 3_600_000),
            },
        };
        wall - off as i64 * 1000
    }
}

/// Parses a timezone argument: a fixed offset, "UTC"/"GMT", or an IANA zone name.
pub fn parse_tz(tz: &Option<Bson>) -> Result<Option<Zone>> {
    match tz {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(None),
        Some(Bson::String(s)) => parse_zone(s).map(Some).ok_or_else(|| {
            Error::location(40485, format!("unrecognized time zone identifier: \"{s}\""))
        }),
        Some(other) => Err(Error::location(
            40517,
            format!(
                "timezone must evaluate to a string, found {}",
                type_name(other)
            ),
        )),
    }
}

fn parse_zone(s: &str) -> Option<Zone> {
    parse_tz_str(s)
        .map(Zone::Fixed)
        .or_else(|| s.parse::<chrono_tz::Tz>().ok().map(Zone::Named))
}

fn parse_tz_str(s: &str) -> Option<i32> {
    match s {
        "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT" | "UCT" | "Zulu" | "Universal" => {
            return Some(0)
        }
        _ => {}
    }
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (h, m) = match digits.len() {
        2 => (digits.parse::<i32>().ok()?, 0),
        4 => (
            digits[..2].parse::<i32>().ok()?,
            digits[2..].parse::<i32>().ok()?,
        ),
        _ => return None,
    };
    if rest.contains(':') && !(rest.len() == 5 && rest.as_bytes()[2] == b':') {
        return None;
    }
    Some(sign * (h * 3600 + m * 60))
}

/// The wall-clock time in `zone` of the instant `ms`, with the offset in force then.
fn local(ms: i64, zone: Zone) -> Result<DateTime<FixedOffset>> {
    let off = FixedOffset::east_opt(zone.offset_at(ms))
        .ok_or_else(|| Error::bad_value("invalid timezone offset"))?;
    let utc = Utc
        .timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| Error::bad_value(format!("date out of range: {ms}")))?;
    Ok(utc.with_timezone(&off))
}

/// Sunday-based week of the year (`%U`), 0..53.
fn week_of_year(d: &DateTime<FixedOffset>) -> u32 {
    let doy = d.ordinal0() as i64; // 0-based
    let dow = d.weekday().num_days_from_sunday() as i64;
    ((doy + 7 - dow) / 7) as u32
}

pub fn date_part(
    name: &str,
    date: Option<Bson>,
    tz: Option<Bson>,
    _has_tz: bool,
) -> Result<Option<Bson>> {
    let offset = parse_tz(&tz)?;
    if nullish(&date) || (tz.is_some() && offset.is_none()) {
        return Ok(Some(Bson::Null));
    }
    let ms = to_millis(date.as_ref().unwrap())?;
    let d = local(ms, offset.unwrap_or(UTC_ZONE))?;
    let v: i64 = match name {
        "$year" => d.year() as i64,
        "$month" => d.month() as i64,
        "$dayOfMonth" => d.day() as i64,
        "$hour" => d.hour() as i64,
        "$minute" => d.minute() as i64,
        "$second" => d.second() as i64,
        "$millisecond" => (d.timestamp_subsec_millis() % 1000) as i64,
        "$dayOfWeek" => d.weekday().number_from_sunday() as i64,
        "$dayOfYear" => d.ordinal() as i64,
        "$week" => week_of_year(&d) as i64,
        "$isoWeek" => d.iso_week().week() as i64,
        "$isoWeekYear" => d.iso_week().year() as i64,
        "$isoDayOfWeek" => d.weekday().number_from_monday() as i64,
        _ => return Err(Error::internal(format!("unknown date part {name}"))),
    };
    Ok(Some(Bson::Int32(v as i32)))
}

pub fn format_date(ms: i64, format: &str, zone: Zone) -> Result<String> {
    let d = local(ms, zone)?;
    let offset = d.offset().local_minus_utc();
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(f) = chars.next() else {
            return Err(Error::location(
                18535,
                "Unmatched '%' at end of format string",
            ));
        };
        match f {
            'd' => out.push_str(&format!("{:02}", d.day())),
            'G' => out.push_str(&format!("{:04}", d.iso_week().year())),
            'H' => out.push_str(&format!("{:02}", d.hour())),
            'j' => out.push_str(&format!("{:03}", d.ordinal())),
            'L' => out.push_str(&format!("{:03}", d.timestamp_subsec_millis() % 1000)),
            'm' => out.push_str(&format!("{:02}", d.month())),
            'M' => out.push_str(&format!("{:02}", d.minute())),
            'S' => out.push_str(&format!("{:02}", d.second())),
            'w' => out.push_str(&d.weekday().number_from_sunday().to_string()),
            'u' => out.push_str(&d.weekday().number_from_monday().to_string()),
            'U' => out.push_str(&format!("{:02}", week_of_year(&d))),
            'V' => out.push_str(&format!("{:02}", d.iso_week().week())),
            'Y' => out.push_str(&format!("{:04}", d.year())),
            'z' => {
                let sign = if offset < 0 { '-' } else { '+' };
                let a = offset.abs();
                out.push_str(&format!("{sign}{:02}{:02}", a / 3600, (a % 3600) / 60));
            }
            'Z' => out.push_str(&format!("{:+}", offset / 60)),
            'b' => out.push_str(&d.format("%b").to_string()),
            'B' => out.push_str(&d.format("%B").to_string()),
            '%' => out.push('%'),
            other => {
                return Err(Error::location(
                    18536,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
    }
    Ok(out)
}

pub fn date_to_string(
    get: &dyn Fn(&str) -> Option<Bson>,
    has: &dyn Fn(&str) -> bool,
) -> Result<Option<Bson>> {
    let format = match get("format") {
        None if !has("format") => None,
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::String(s)) => Some(s),
        Some(other) => {
            return Err(Error::location(
                18533,
                format!(
                    "$dateToString requires that 'format' be a string, found: {} with value {}",
                    type_name(&other),
                    show(&other)
                ),
            ))
        }
    };
    let tz = get("timezone");
    let offset = parse_tz(&tz)?;
    if tz.is_some() && offset.is_none() {
        return Ok(Some(Bson::Null));
    }
    let date = get("date");
    if nullish(&date) {
        return Ok(if has("onNull") {
            get("onNull")
        } else {
            Some(Bson::Null)
        });
    }
    let ms = to_millis(date.as_ref().unwrap())?;
    let fmt = format.unwrap_or_else(|| {
        if offset.unwrap_or(UTC_ZONE) == UTC_ZONE {
            "%Y-%m-%dT%H:%M:%S.%LZ".into()
        } else {
            "%Y-%m-%dT%H:%M:%S.%L".into()
        }
    });
    Ok(Some(Bson::String(format_date(
        ms,
        &fmt,
        offset.unwrap_or(UTC_ZONE),
    )?)))
}

/// Parses common ISO-8601 forms; a string without offset is local time in `default_zone`
/// (else UTC).
pub fn parse_date_string(s: &str, default_zone: Option<Zone>) -> Option<i64> {
    let s = s.trim();
    if let Ok(d) = DateTime::parse_from_rfc3339(s) {
        return Some(d.timestamp_millis());
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f%z",
        "%Y-%m-%d %H:%M:%S%.f%z",
        "%Y-%m-%dT%H:%M%z",
        "%Y-%m-%dT%H:%M:%S%.f%:z",
    ] {
        if let Ok(d) = DateTime::parse_from_str(s, f) {
            return Some(d.timestamp_millis());
        }
    }
    let (body, utc) = match s.strip_suffix('Z') {
        Some(b) => (b, true),
        None => (s, false),
    };
    let zone = if utc {
        UTC_ZONE
    } else {
        default_zone.unwrap_or(UTC_ZONE)
    };
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
        "%Y/%m/%d %H:%M:%S%.f",
    ] {
        if let Ok(d) = NaiveDateTime::parse_from_str(body, f) {
            return Some(zone.to_utc_millis(d));
        }
    }
    for f in ["%Y-%m-%d", "%Y/%m/%d", "%B %d, %Y", "%b %d, %Y", "%Y%m%d"] {
        if let Ok(d) = NaiveDate::parse_from_str(body, f) {
            return Some(zone.to_utc_millis(d.and_hms_opt(0, 0, 0)?));
        }
    }
    None
}

fn mongo_format_to_chrono(f: &str) -> Result<(String, bool)> {
    let mut out = String::new();
    let mut has_tz = false;
    let mut chars = f.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(n) = chars.next() else {
            return Err(Error::location(
                18535,
                "Unmatched '%' at end of format string",
            ));
        };
        match n {
            'd' | 'H' | 'm' | 'M' | 'S' | 'Y' | 'j' | 'b' | 'B' | 'U' | 'V' | 'G' | 'u' => {
                out.push('%');
                out.push(n)
            }
            'L' => out.push_str("%3f"),
            'z' => {
                has_tz = true;
                out.push_str("%z")
            }
            'Z' => {
                has_tz = true;
                out.push_str("%z")
            }
            '%' => out.push_str("%%"),
            other => {
                return Err(Error::location(
                    18536,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
    }
    Ok((out, has_tz))
}

pub fn date_from_string(
    get: &dyn Fn(&str) -> Option<Bson>,
    has: &dyn Fn(&str) -> bool,
) -> Result<Option<Bson>> {
    let tz = get("timezone");
    let offset = parse_tz(&tz)?;
    let s = match get("dateString") {
        v if nullish(&v) => {
            return Ok(if has("onNull") {
                get("onNull")
            } else {
                Some(Bson::Null)
            })
        }
        Some(Bson::String(s)) => s,
        Some(other) => {
            let e = Error::new(CONVERSION_FAILURE, format!("$dateFromString requires that 'dateString' be a string, found: {} with value {}", type_name(&other), show(&other)));
            return if has("onError") {
                Ok(get("onError"))
            } else {
                Err(e)
            };
        }
        None => unreachable!(),
    };
    let parsed = match get("format") {
        None | Some(Bson::Null) => parse_date_string(&s, offset),
        Some(Bson::String(f)) => {
            let (cf, has_tz) = mongo_format_to_chrono(&f)?;
            if has_tz {
                DateTime::parse_from_str(&s, &cf)
                    .ok()
                    .map(|d| d.timestamp_millis())
            } else {
                NaiveDateTime::parse_from_str(&s, &cf)
                    .ok()
                    .or_else(|| {
                        NaiveDate::parse_from_str(&s, &cf)
                            .ok()
                            .and_then(|d| d.and_hms_opt(0, 0, 0))
                    })
                    .map(|d| offset.unwrap_or(UTC_ZONE).to_utc_millis(d))
            }
        }
        Some(other) => {
            return Err(Error::location(
                40684,
                format!(
                    "$dateFromString requires that 'format' be a string, found: {} with value {}",
                    type_name(&other),
                    show(&other)
                ),
            ))
        }
    };
    match parsed {
        Some(ms) => Ok(Some(Bson::DateTime(bson::DateTime::from_millis(ms)))),
        None => {
            if has("onError") {
                Ok(get("onError"))
            } else {
                Err(Error::new(
                    CONVERSION_FAILURE,
                    format!("Error parsing date string '{s}'"),
                ))
            }
        }
    }
}

pub fn date_to_parts(get: &dyn Fn(&str) -> Option<Bson>) -> Result<Option<Bson>> {
    let tz = get("timezone");
    let offset = parse_tz(&tz)?;
    let date = get("date");
    if nullish(&date) || (tz.is_some() && offset.is_none()) {
        return Ok(Some(Bson::Null));
    }
    let iso = match get("iso8601") {
        None => false,
        Some(Bson::Boolean(b)) => b,
        Some(other) => {
            return Err(Error::location(
                40521,
                format!(
                    "iso8601 must evaluate to a bool, found {}",
                    type_name(&other)
                ),
            ))
        }
    };
    let d = local(
        to_millis(date.as_ref().unwrap())?,
        offset.unwrap_or(UTC_ZONE),
    )?;
    let ms = (d.timestamp_subsec_millis() % 1000) as i32;
    Ok(Some(Bson::Document(if iso {
        doc! {
            "isoWeekYear": d.iso_week().year(), "isoWeek": d.iso_week().week() as i32,
            "isoDayOfWeek": d.weekday().number_from_monday() as i32,
            "hour": d.hour() as i32, "minute": d.minute() as i32, "second": d.second() as i32, "millisecond": ms,
        }
    } else {
        doc! {
            "year": d.year(), "month": d.month() as i32, "day": d.day() as i32,
            "hour": d.hour() as i32, "minute": d.minute() as i32, "second": d.second() as i32, "millisecond": ms,
        }
    })))
}

pub fn date_from_parts(
    get: &dyn Fn(&str) -> Option<Bson>,
    has: &dyn Fn(&str) -> bool,
) -> Result<Option<Bson>> {
    let tz = get("timezone");
    let zone = parse_tz(&tz)?.unwrap_or(UTC_ZONE);
    let iso = has("isoWeekYear");
    if !iso && !has("year") {
        return Err(Error::location(
            40516,
            "$dateFromParts requires either 'year' or 'isoWeekYear' to be present",
        ));
    }
    let part = |k: &str, default: i64| -> Result<Option<i64>> {
        if !has(k) {
            return Ok(Some(default));
        }
        match get(k) {
            v if nullish(&v) => Ok(None),
            Some(v) if is_number(&v) => num::as_exact_i64(&v).map(Some).ok_or_else(|| {
                Error::location(
                    40515,
                    format!(
                        "'{k}' must evaluate to an integer, found {} with value {}",
                        type_name(&v),
                        show(&v)
                    ),
                )
            }),
            v => Err(Error::location(
                40515,
                format!(
                    "'{k}' must evaluate to an integer, found {}",
                    type_name_opt(&v)
                ),
            )),
        }
    };
    let mut fields = Vec::new();
    let names: &[(&str, i64)] = if iso {
        &[
            ("isoWeekYear", 1970),
            ("isoWeek", 1),
            ("isoDayOfWeek", 1),
            ("hour", 0),
            ("minute", 0),
            ("second", 0),
            ("millisecond", 0),
        ]
    } else {
        &[
            ("year", 1970),
            ("month", 1),
            ("day", 1),
            ("hour", 0),
            ("minute", 0),
            ("second", 0),
            ("millisecond", 0),
        ]
    };
    for (k, d) in names {
        match part(k, *d)? {
            Some(v) => fields.push(v),
            None => return Ok(Some(Bson::Null)),
        }
    }
    let base = if iso {
        NaiveDate::from_isoywd_opt(fields[0] as i32, 1, chrono::Weekday::Mon)
            .ok_or_else(|| {
                Error::location(
                    31095,
                    "'isoWeekYear' must evaluate to an integer in the range 1 to 9999",
                )
            })?
            .and_hms_opt(0, 0, 0)
            .unwrap()
            + Duration::weeks(fields[1] - 1)
            + Duration::days(fields[2] - 1)
    } else {
        let y = fields[0];
        if !(1..=9999).contains(&y) {
            return Err(Error::location(
                40523,
                format!("'year' must evaluate to an integer in the range 0 to 9999, found {y}"),
            ));
        }
        let months = fields[1] - 1;
        let y2 = y + months.div_euclid(12);
        let m2 = months.rem_euclid(12) + 1;
        NaiveDate::from_ymd_opt(y2 as i32, m2 as u32, 1)
            .ok_or_else(|| Error::bad_value("date out of range in $dateFromParts"))?
            .and_hms_opt(0, 0, 0)
            .unwrap()
            + Duration::days(fields[2] - 1)
    };
    let dt = base
        + Duration::hours(fields[3])
        + Duration::minutes(fields[4])
        + Duration::seconds(fields[5])
        + Duration::milliseconds(fields[6]);
    Ok(Some(Bson::DateTime(bson::DateTime::from_millis(
        zone.to_utc_millis(dt),
    ))))
}

fn unit_arg(v: Option<Bson>, op: &str) -> Result<Option<String>> {
    match v {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(None),
        Some(Bson::String(s)) => match s.as_str() {
            "year" | "quarter" | "month" | "week" | "day" | "hour" | "minute" | "second" | "millisecond" => Ok(Some(s)),
            _ => Err(Error::failed_to_parse(format!("{op} parameter 'unit' value parsing failed :: caused by :: unknown time unit value: {s}"))),
        },
        Some(other) => Err(Error::location(5439013, format!("{op} requires 'unit' to be a string, but got {}", type_name(&other)))),
    }
}

fn add_months(d: NaiveDateTime, months: i64) -> Option<NaiveDateTime> {
    if months >= 0 {
        d.checked_add_months(chrono::Months::new(u32::try_from(months).ok()?))
    } else {
        d.checked_sub_months(chrono::Months::new(u32::try_from(-months).ok()?))
    }
}

/// Adds whole calendar days to a wall-clock time: across a daylight-saving change a day
/// is 23 or 25 hours, as `$dateAdd` with unit "day" and a `timezone` counts it.
fn add_days(d: NaiveDateTime, days: i64) -> Option<NaiveDateTime> {
    d.checked_add_signed(Duration::try_days(days)?)
}

pub fn date_add(name: &str, get: &dyn Fn(&str) -> Option<Bson>) -> Result<Option<Bson>> {
    let tz = get("timezone");
    let zone = parse_tz(&tz)?.unwrap_or(UTC_ZONE);
    let start = get("startDate");
    let unit = unit_arg(get("unit"), name)?;
    let amount = get("amount");
    if nullish(&start) || unit.is_none() || nullish(&amount) {
        return Ok(Some(Bson::Null));
    }
    let ms = to_millis(start.as_ref().unwrap())?;
    let amount = amount.unwrap();
    let Some(mut n) = num::as_exact_i64(&amount).filter(|_| is_number(&amount)) else {
        return Err(Error::location(
            5166403,
            format!(
                "{name} requires 'amount' to be an integer, but got {}",
                type_name(&amount)
            ),
        ));
    };
    if name == "$dateSubtract" {
        n = -n;
    }
    let unit = unit.unwrap();
    let overflow = || Error::location(5166406, format!("{name} overflowed"));
    let fixed = |per: i64| -> Result<Option<Bson>> {
        let r = n
            .checked_mul(per)
            .and_then(|d| ms.checked_add(d))
            .ok_or_else(overflow)?;
        Ok(Some(Bson::DateTime(bson::DateTime::from_millis(r))))
    };
    // Days and longer are calendar units: added to the wall-clock time in `timezone`.
    let calendar = |add: &dyn Fn(NaiveDateTime) -> Option<NaiveDateTime>| -> Result<Option<Bson>> {
        let d = local(ms, zone)?.naive_local();
        let r = add(d).ok_or_else(overflow)?;
        Ok(Some(Bson::DateTime(bson::DateTime::from_millis(
            zone.to_utc_millis(r),
        ))))
    };
    match unit.as_str() {
        "millisecond" => fixed(1),
        "second" => fixed(1000),
        "minute" => fixed(60_000),
        "hour" => fixed(3_600_000),
        "day" => calendar(&|d| add_days(d, n)),
        "week" => calendar(&|d| add_days(d, n.checked_mul(7)?)),
        _ => {
            let months = match unit.as_str() {
                "month" => Some(n),
                "quarter" => n.checked_mul(3),
                _ => n.checked_mul(12),
            }
            .ok_or_else(overflow)?;
            calendar(&|d| add_months(d, months))
        }
    }
}

pub fn date_diff(get: &dyn Fn(&str) -> Option<Bson>) -> Result<Option<Bson>> {
    let tz = get("timezone");
    let zone = parse_tz(&tz)?.unwrap_or(UTC_ZONE);
    let (s, e) = (get("startDate"), get("endDate"));
    let unit = unit_arg(get("unit"), "$dateDiff")?;
    if nullish(&s) || nullish(&e) || unit.is_none() {
        return Ok(Some(Bson::Null));
    }
    let (a, b) = (
        to_millis(s.as_ref().unwrap())?,
        to_millis(e.as_ref().unwrap())?,
    );
    let (la, lb) = (local(a, zone)?, local(b, zone)?);
    // Units shorter than a day count boundaries passed in elapsed time, placed by the
    // start's offset; days and weeks count local calendar days.
    let off = la.offset().local_minus_utc() as i64 * 1000;
    let days = |d: &DateTime<FixedOffset>| local_days(d.date_naive());
    let floor_diff = |per: i64| (b + off).div_euclid(per) - (a + off).div_euclid(per);
    let r = match unit.unwrap().as_str() {
        "year" => (lb.year() - la.year()) as i64,
        "quarter" => {
            (lb.year() as i64 * 4 + (lb.month0() / 3) as i64)
                - (la.year() as i64 * 4 + (la.month0() / 3) as i64)
        }
        "month" => {
            (lb.year() as i64 * 12 + lb.month0() as i64)
                - (la.year() as i64 * 12 + la.month0() as i64)
        }
        "week" => {
            let sow = match get("startOfWeek") {
                Some(Bson::String(s)) => week_start(&s)?,
                _ => 0,
            };
            // Days since epoch (a Thursday = 4 from Sunday), shifted so weeks start on `sow`.
            let (da, db) = (days(&la), days(&lb));
            let shift = (4 - sow as i64).rem_euclid(7);
            (db + shift).div_euclid(7) - (da + shift).div_euclid(7)
        }
        "day" => days(&lb) - days(&la),
        "hour" => floor_diff(3_600_000),
        "minute" => floor_diff(60_000),
        "second" => floor_diff(1000),
        _ => b - a,
    };
    Ok(Some(Bson::Int64(r)))
}

/// Days from 1970-01-01 to a calendar date.
fn local_days(d: NaiveDate) -> i64 {
    (d - NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days()
}

/// Midnight at the start of a calendar date, `days` after 1970-01-01, as an instant in `zone`.
fn local_midnight(days: i64, zone: Zone) -> Result<i64> {
    let d = NaiveDate::from_ymd_opt(1970, 1, 1)
        .unwrap()
        .checked_add_signed(Duration::try_days(days).ok_or_else(out_of_range)?)
        .ok_or_else(out_of_range)?;
    Ok(zone.to_utc_millis(d.and_hms_opt(0, 0, 0).unwrap()))
}

fn out_of_range() -> Error {
    Error::bad_value("date out of range")
}

fn week_start(s: &str) -> Result<u32> {
    let l = s.to_ascii_lowercase();
    Ok(match l.as_str() {
        "sun" | "sunday" => 0,
        "mon" | "monday" => 1,
        "tue" | "tuesday" => 2,
        "wed" | "wednesday" => 3,
        "thu" | "thursday" => 4,
        "fri" | "friday" => 5,
        "sat" | "saturday" => 6,
        _ => {
            return Err(Error::location(
                5439015,
                format!("unknown startOfWeek: {s}"),
            ))
        }
    })
}

pub fn date_trunc(get: &dyn Fn(&str) -> Option<Bson>) -> Result<Option<Bson>> {
    let tz = get("timezone");
    let zone = parse_tz(&tz)?.unwrap_or(UTC_ZONE);
    let date = get("date");
    let unit = unit_arg(get("unit"), "$dateTrunc")?;
    if nullish(&date) || unit.is_none() {
        return Ok(Some(Bson::Null));
    }
    let bin = match get("binSize") {
        None => 1,
        Some(v) if is_number(&v) && num::as_exact_i64(&v).is_some_and(|n| n > 0) => num::as_exact_i64(&v).unwrap(),
        Some(Bson::Null) => return Ok(Some(Bson::Null)),
        Some(v) => return Err(Error::location(5439017, format!("$dateTrunc requires 'binSize' to be a 64-bit integer greater than 0, but got value '{}' of type {}", show(&v), type_name(&v)))),
    };
    let ms = to_millis(date.as_ref().unwrap())?;
    let d = local(ms, zone)?;
    let off = d.offset().local_minus_utc() as i64 * 1000;
    // Reference point 2000-01-01T00:00:00 local time, as mongod.
    let reference = 946_684_800_000i64;
    let reference_days = reference / 86_400_000;
    let fixed = |per: i64| -> i64 {
        let lm = ms + off - reference;
        lm.div_euclid(per * bin) * per * bin + reference - off
    };
    let r = match unit.unwrap().as_str() {
        "millisecond" => fixed(1),
        "second" => fixed(1000),
        "minute" => fixed(60_000),
        "hour" => fixed(3_600_000),
        // Days and weeks are counted in local calendar days, so the result is a local
        // midnight even when a daylight-saving change lies between it and the date.
        "day" => {
            let n = local_days(d.date_naive()) - reference_days;
            local_midnight(n.div_euclid(bin) * bin + reference_days, zone)?
        }
        "week" => {
            let sow = match get("startOfWeek") {
                Some(Bson::String(s)) => week_start(&s)?,
                _ => 0,
            };
            // 2000-01-02 is a Sunday.
            let r = reference_days + 1 + sow as i64;
            let per = 7 * bin;
            let n = local_days(d.date_naive()) - r;
            local_midnight(n.div_euclid(per) * per + r, zone)?
        }
        u => {
            let per = match u {
                "month" => 1,
                "quarter" => 3,
                _ => 12,
            } * bin;
            let months = (d.year() as i64 - 2000) * 12 + d.month0() as i64;
            let t = months.div_euclid(per) * per;
            let y = 2000 + t.div_euclid(12);
            let m = t.rem_euclid(12) + 1;
            let nd = NaiveDate::from_ymd_opt(y as i32, m as u32, 1).ok_or_else(out_of_range)?;
            zone.to_utc_millis(nd.and_hms_opt(0, 0, 0).unwrap())
        }
    };
    Ok(Some(Bson::DateTime(bson::DateTime::from_millis(r))))
}
