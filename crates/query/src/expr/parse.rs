//! Parsing an expression into its [`Expr`] tree: operator names, argument counts and
//! named arguments checked as mongod checks them when it parses a pipeline.

use super::util::{self, type_name};
use super::{accum_n, Expr};
use crate::error::{Error, Result};
use bson::{Bson, Document};

fn parse_field_path(s: &str) -> Result<Vec<String>> {
    let parts: Vec<String> = s.split('.').map(|p| p.to_string()).collect();
    for p in &parts {
        if p.is_empty() {
            return Err(Error::location(
                15998,
                "FieldPath field names may not be empty strings.",
            ));
        }
        if p.starts_with('$') {
            return Err(Error::location(
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ));
        }
        if p.contains('\0') {
            return Err(Error::location(
                16411,
                "FieldPath field names may not contain '\\0'.",
            ));
        }
    }
    Ok(parts)
}

/// Validates a user variable name (`$let`, `$map.as`, `$lookup.let`, ...).
pub fn validate_variable_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Err(Error::location(
            16866,
            "empty variable names are not allowed",
        ));
    };
    if !first.is_ascii_lowercase() && first.is_ascii() {
        return Err(Error::location(
            16867,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    for c in chars {
        if !(c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii()) {
            return Err(Error::location(
                16868,
                format!("'{name}' contains an invalid character for a variable name: '{c}'"),
            ));
        }
    }
    Ok(())
}

fn positional(arg: &Bson) -> Vec<&Bson> {
    match arg {
        Bson::Array(a) => a.iter().collect(),
        other => vec![other],
    }
}

/// (min, max) argument counts of positional operators; `None` = not a positional operator.
fn arity(name: &str) -> Option<(usize, Option<usize>)> {
    let exact = |n| Some((n, Some(n)));
    match name {
        "$add" | "$multiply" | "$and" | "$or" | "$concat" | "$concatArrays" | "$setUnion"
        | "$setIntersection" | "$mergeObjects" | "$sum" | "$avg" | "$min" | "$max"
        | "$stdDevPop" | "$stdDevSamp" | "$bitAnd" | "$bitOr" | "$bitXor" => Some((0, None)),
        "$ifNull" => Some((2, None)),
        "$setEquals" => Some((2, None)),
        "$subtract" | "$divide" | "$mod" | "$pow" | "$log" | "$eq" | "$ne" | "$gt" | "$gte"
        | "$lt" | "$lte" | "$cmp" | "$strcasecmp" | "$split" | "$arrayElemAt" | "$in"
        | "$setDifference" | "$setIsSubset" => exact(2),
        "$abs" | "$ceil" | "$floor" | "$sqrt" | "$exp" | "$ln" | "$log10" | "$not" | "$toLower"
        | "$toUpper" | "$strLenBytes" | "$strLenCP" | "$size" | "$first" | "$last" | "$isArray"
        | "$reverseArray" | "$anyElementTrue" | "$allElementsTrue" | "$type" | "$toString"
        | "$toInt" | "$toLong" | "$toDouble" | "$toDecimal" | "$toBool" | "$toDate"
        | "$toObjectId" | "$isNumber" | "$objectToArray" | "$arrayToObject" | "$binarySize"
        | "$bsonSize" | "$sin" | "$cos" | "$tan" | "$asin" | "$acos" | "$atan" | "$sinh"
        | "$cosh" | "$tanh" | "$asinh" | "$acosh" | "$atanh" | "$degreesToRadians"
        | "$radiansToDegrees" | "$bitNot" | "$tsSecond" | "$tsIncrement" => exact(1),
        "$atan2" => exact(2),
        "$cond" | "$substr" | "$substrBytes" | "$substrCP" => exact(3),
        "$round" | "$trunc" => Some((1, Some(2))),
        "$slice" | "$range" => Some((2, Some(3))),
        "$indexOfBytes" | "$indexOfCP" | "$indexOfArray" => Some((2, Some(4))),
        "$rand" => exact(0),
        _ => None,
    }
}

pub(super) const DATE_PARTS: &[&str] = &[
    "$year",
    "$month",
    "$dayOfMonth",
    "$hour",
    "$minute",
    "$second",
    "$millisecond",
    "$dayOfWeek",
    "$dayOfYear",
    "$week",
    "$isoWeek",
    "$isoWeekYear",
    "$isoDayOfWeek",
];

/// Named-argument operators: (allowed keys, required keys).
fn named_spec(name: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    Some(match name {
        "$dateToString" => (&["date", "format", "timezone", "onNull"], &["date"]),
        "$dateFromString" => (
            &["dateString", "format", "timezone", "onError", "onNull"],
            &["dateString"],
        ),
        "$dateFromParts" => (
            &[
                "year",
                "month",
                "day",
                "hour",
                "minute",
                "second",
                "millisecond",
                "timezone",
                "isoWeekYear",
                "isoWeek",
                "isoDayOfWeek",
            ],
            &[],
        ),
        "$dateToParts" => (&["date", "timezone", "iso8601"], &["date"]),
        "$regexMatch" | "$regexFind" | "$regexFindAll" => {
            (&["input", "regex", "options"], &["input", "regex"])
        }
        "$replaceOne" | "$replaceAll" => (
            &["input", "find", "replacement"],
            &["input", "find", "replacement"],
        ),
        "$trim" | "$ltrim" | "$rtrim" => (&["input", "chars"], &["input"]),
        "$zip" => (&["inputs", "useLongestLength", "defaults"], &["inputs"]),
        "$convert" => (&["input", "to", "onError", "onNull"], &["input", "to"]),
        "$getField" => (&["field", "input"], &["field"]),
        "$setField" => (&["field", "input", "value"], &["field", "input", "value"]),
        "$unsetField" => (&["field", "input"], &["field", "input"]),
        "$dateAdd" | "$dateSubtract" => (
            &["startDate", "unit", "amount", "timezone"],
            &["startDate", "unit", "amount"],
        ),
        "$dateDiff" => (
            &["startDate", "endDate", "unit", "timezone", "startOfWeek"],
            &["startDate", "endDate", "unit"],
        ),
        "$dateTrunc" => (
            &["date", "unit", "binSize", "timezone", "startOfWeek"],
            &["date", "unit"],
        ),
        _ => return None,
    })
}

fn named_err(op: &str, what: NamedErr, key: &str) -> Error {
    // mongod uses a distinct assertion code per operator; the common ones are mirrored here.
    match (op, what) {
        ("$dateToString", NamedErr::Unknown) => Error::location(
            18534,
            format!("Unrecognized argument to $dateToString: {key}"),
        ),
        ("$dateToString", NamedErr::Missing) => {
            Error::location(18628, "Missing 'date' parameter to $dateToString")
        }
        ("$dateFromString", NamedErr::Unknown) => Error::location(
            40541,
            format!("Unrecognized argument to $dateFromString: {key}"),
        ),
        ("$dateFromString", NamedErr::Missing) => {
            Error::location(40542, "Missing 'dateString' parameter to $dateFromString")
        }
        ("$regexMatch" | "$regexFind" | "$regexFindAll", NamedErr::Unknown) => {
            Error::location(31024, format!("{op} found an unknown argument: {key}"))
        }
        ("$regexMatch" | "$regexFind" | "$regexFindAll", NamedErr::Missing) => {
            if key == "input" {
                Error::location(31022, format!("{op} requires 'input' parameter"))
            } else {
                Error::location(31023, format!("{op} requires 'regex' parameter"))
            }
        }
        ("$replaceOne" | "$replaceAll", NamedErr::Unknown) => {
            Error::location(51750, format!("{op} found an unknown argument: {key}"))
        }
        ("$replaceOne" | "$replaceAll", NamedErr::Missing) => {
            let code = match key {
                "input" => 51749,
                "find" => 51748,
                _ => 51747,
            };
            Error::location(code, format!("{op} requires '{key}' to be specified"))
        }
        ("$trim" | "$ltrim" | "$rtrim", NamedErr::Unknown) => {
            Error::location(50694, format!("{op} found an unknown argument: {key}"))
        }
        ("$trim" | "$ltrim" | "$rtrim", NamedErr::Missing) => {
            Error::location(50695, format!("{op} requires an 'input' field"))
        }
        ("$zip", NamedErr::Unknown) => {
            Error::location(34464, format!("$zip found an unknown argument: {key}"))
        }
        ("$zip", NamedErr::Missing) => Error::location(34465, "Missing 'inputs' parameter to $zip"),
        ("$convert", NamedErr::Unknown) => {
            Error::failed_to_parse(format!("$convert found an unknown argument: {key}"))
        }
        ("$convert", NamedErr::Missing) => {
            Error::failed_to_parse(format!("Missing '{key}' parameter to $convert"))
        }
        ("$getField" | "$setField" | "$unsetField", NamedErr::Unknown) => {
            Error::location(3041701, format!("{op} found an unknown argument: {key}"))
        }
        ("$getField" | "$setField" | "$unsetField", NamedErr::Missing) => {
            Error::location(3041702, format!("{op} requires '{key}' to be specified"))
        }
        (_, NamedErr::Unknown) => {
            Error::failed_to_parse(format!("Unrecognized argument to {op}: {key}"))
        }
        (_, NamedErr::Missing) => {
            Error::failed_to_parse(format!("Missing '{key}' parameter to {op}"))
        }
    }
}

#[derive(Clone, Copy)]
enum NamedErr {
    Unknown,
    Missing,
}

impl Expr {
    /// Parses an expression (operator names and argument counts are checked here).
    pub fn parse(v: &Bson) -> Result<Expr> {
        match v {
            Bson::String(s) if s.starts_with("$$") => {
                let body = &s[2..];
                let (name, rest) = match body.split_once('.') {
                    Some((n, r)) => (n, Some(r)),
                    None => (body, None),
                };
                if name.is_empty() {
                    return Err(Error::location(
                        16869,
                        "empty variable names are not allowed",
                    ));
                }
                let is_system = name.chars().next().is_some_and(|c| c.is_ascii_uppercase());
                if !is_system {
                    validate_variable_name(name)?;
                }
                let path = match rest {
                    Some(r) => parse_field_path(r)?,
                    None => Vec::new(),
                };
                Ok(Expr::Var(name.to_string(), path))
            }
            Bson::String(s) if s.starts_with('$') => {
                if s.len() == 1 {
                    return Err(Error::location(
                        16872,
                        "'$' by itself is not a valid FieldPath",
                    ));
                }
                Ok(Expr::Field(parse_field_path(&s[1..])?))
            }
            Bson::Document(d) => Self::parse_object(d),
            Bson::Array(a) => Ok(Expr::Arr(a.iter().map(Expr::parse).collect::<Result<_>>()?)),
            other => Ok(Expr::Const(other.clone())),
        }
    }

    fn parse_object(d: &Document) -> Result<Expr> {
        let Some((first, _)) = d.iter().next() else {
            return Ok(Expr::Doc(Vec::new()));
        };
        if first.starts_with('$') {
            if d.len() != 1 {
                return Err(Error::location(
                    15983,
                    format!(
                        "an expression specification must contain exactly one field, the name of the expression. Found {} fields in {}",
                        d.len(),
                        util::show(&Bson::Document(d.clone()))
                    ),
                ));
            }
            let (name, arg) = d.iter().next().unwrap();
            return Self::parse_operator(name, arg);
        }
        let mut fields = Vec::with_capacity(d.len());
        for (k, v) in d {
            if k.starts_with('$') {
                return Err(Error::location(
                    16410,
                    "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
                ));
            }
            if k.contains('.') {
                return Err(Error::location(
                    16412,
                    "FieldPath field names may not contain '.'.",
                ));
            }
            if k.is_empty() {
                return Err(Error::location(
                    15998,
                    "FieldPath field names may not be empty strings.",
                ));
            }
            fields.push((k.clone(), Expr::parse(v)?));
        }
        Ok(Expr::Doc(fields))
    }

    /// A constant `regex` (and `options`) is compiled when parsed, as mongod does, so a bad
    /// pattern fails the command even when no document is evaluated.
    fn check_constant_regex(name: &str, args: &[(String, Expr)]) -> Result<()> {
        let constant = |key: &str| -> Option<Option<Bson>> {
            match args.iter().find(|(k, _)| k == key) {
                None => Some(None),
                Some((_, e)) => e.as_const().map(|c| Some(c.clone())),
            }
        };
        match (constant("regex"), constant("options")) {
            (Some(regex), Some(options)) => {
                super::string::check_constant_regex(name, regex, options)
            }
            _ => Ok(()),
        }
    }

    fn parse_named(name: &str, arg: &Bson) -> Result<Vec<(String, Expr)>> {
        let (allowed, required) = named_spec(name).unwrap();
        let Bson::Document(d) = arg else {
            return Err(match name {
                "$trim" | "$ltrim" | "$rtrim" => Error::location(
                    50696,
                    format!("{name} only supports an object as its argument"),
                ),
                "$dateToString" => Error::location(
                    18629,
                    "$dateToString only supports an object as its argument",
                ),
                "$regexMatch" | "$regexFind" | "$regexFindAll" => Error::location(
                    31018,
                    format!(
                        "{name} expects an object of named arguments but found: {}",
                        util::type_name(arg)
                    ),
                ),
                "$zip" => Error::location(34460, "$zip only supports an object as an argument"),
                "$convert" => Error::failed_to_parse(
                    "$convert expects an object of named arguments but found: ".to_string()
                        + util::type_name(arg),
                ),
                _ => Error::failed_to_parse(format!(
                    "{name} only supports an object as its argument"
                )),
            });
        };
        let mut out = Vec::new();
        for (k, v) in d {
            if !allowed.contains(&k.as_str()) {
                return Err(named_err(name, NamedErr::Unknown, k));
            }
            out.push((k.clone(), Expr::parse(v)?));
        }
        for r in required {
            if !d.contains_key(*r) {
                return Err(named_err(name, NamedErr::Missing, r));
            }
        }
        if matches!(name, "$regexMatch" | "$regexFind" | "$regexFindAll") {
            Self::check_constant_regex(name, &out)?;
        }
        Ok(out)
    }

    fn parse_operator(name: &str, arg: &Bson) -> Result<Expr> {
        match name {
            "$literal" | "$const" => return Ok(Expr::Const(arg.clone())),
            "$let" => return Self::parse_let(arg),
            "$map" => return Self::parse_map(arg),
            "$filter" => return Self::parse_filter(arg),
            "$reduce" => return Self::parse_reduce(arg),
            "$switch" => return Self::parse_switch(arg),
            "$sortArray" => return Self::parse_sort_array(arg),
            "$function" => return Self::parse_function(arg),
            "$firstN" | "$lastN" | "$minN" | "$maxN" => {
                let (n, input) = accum_n::parse_n_args(name, arg)?;
                return Ok(Expr::Named(
                    name.to_string(),
                    vec![("n".into(), n), ("input".into(), input)],
                ));
            }
            "$median" | "$percentile" => {
                let code = if name == "$median" { 7436201 } else { 7436200 };
                let q = accum_n::parse_quantile(name, arg, code)?;
                let ps = q.ps.into_iter().map(Bson::Double).collect();
                return Ok(Expr::Named(
                    name.to_string(),
                    vec![
                        ("input".into(), q.input),
                        ("p".into(), Expr::Const(Bson::Array(ps))),
                    ],
                ));
            }
            "$meta" => {
                return match arg {
                    // The scan attached the score as a hidden top-level field.
                    Bson::String(m) if m == "textScore" => {
                        Ok(Expr::Field(vec![crate::text::TEXT_SCORE_FIELD.to_string()]))
                    }
                    Bson::String(m) => Err(Error::location(
                        17308,
                        format!("Unsupported argument to $meta: {m}"),
                    )),
                    _ => Err(Error::location(
                        17307,
                        "$meta only supports string arguments",
                    )),
                };
            }
            "$cond" => {
                if let Bson::Document(d) = arg {
                    let mut iff = None;
                    let mut then = None;
                    let mut els = None;
                    for (k, v) in d {
                        match k.as_str() {
                            "if" => iff = Some(Expr::parse(v)?),
                            "then" => then = Some(Expr::parse(v)?),
                            "else" => els = Some(Expr::parse(v)?),
                            _ => {
                                return Err(Error::location(
                                    17083,
                                    format!("Unrecognized parameter to $cond: {k}"),
                                ))
                            }
                        }
                    }
                    let iff = iff
                        .ok_or_else(|| Error::location(17080, "Missing 'if' parameter to $cond"))?;
                    let then = then.ok_or_else(|| {
                        Error::location(17081, "Missing 'then' parameter to $cond")
                    })?;
                    let els = els.ok_or_else(|| {
                        Error::location(17082, "Missing 'else' parameter to $cond")
                    })?;
                    return Ok(Expr::Op(name.to_string(), vec![iff, then, els]));
                }
            }
            "$getField" if !matches!(arg, Bson::Document(d) if d.keys().next().is_some_and(|k| !k.starts_with('$'))) =>
            {
                // Shorthand: {$getField: "name"} (or an expression for the field).
                let f = Expr::parse(arg)?;
                return Ok(Expr::Named(name.to_string(), vec![("field".into(), f)]));
            }
            _ => {}
        }
        if DATE_PARTS.contains(&name) {
            return Self::parse_date_part(name, arg);
        }
        if named_spec(name).is_some() {
            return Ok(Expr::Named(name.to_string(), Self::parse_named(name, arg)?));
        }
        let Some((min, max)) = arity(name) else {
            return Err(Error::new(
                crate::error::codes::INVALID_PIPELINE_OPERATOR,
                format!("Unrecognized expression '{name}'"),
            ));
        };
        // `{$rand: {}}` is how mongod documents an operator without arguments.
        let raw = match arg {
            Bson::Document(d) if d.is_empty() && max == Some(0) => Vec::new(),
            _ => positional(arg),
        };
        let n = raw.len();
        if Some(min) == max && n != min {
            return Err(Error::location(
                16020,
                format!("Expression {name} takes exactly {min} arguments. {n} were passed in."),
            ));
        }
        if n < min || max.is_some_and(|m| n > m) {
            if name == "$ifNull" {
                return Err(Error::location(
                    1257300,
                    format!("$ifNull needs at least two arguments, had: {n}"),
                ));
            }
            if name == "$setEquals" {
                return Err(Error::location(
                    17045,
                    format!("$setEquals needs at least two arguments had: {n}"),
                ));
            }
            return Err(Error::location(
                28667,
                format!(
                    "Expression {name} takes at least {min} arguments, and at most {}, but {n} were passed in.",
                    max.unwrap_or(usize::MAX)
                ),
            ));
        }
        let args = raw
            .into_iter()
            .map(Expr::parse)
            .collect::<Result<Vec<_>>>()?;
        Ok(Expr::Op(name.to_string(), args))
    }

    /// `{$function: {body, args, lang: "js"}}`, validated as mongod does; the body is
    /// compiled when first called (once per operation).
    fn parse_function(arg: &Bson) -> Result<Expr> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                31260,
                format!(
                    "$function requires an object as an argument, found: {}",
                    type_name(arg)
                ),
            ));
        };
        let Some(body) = d.get("body") else {
            return Err(Error::location(
                31261,
                "The body function must be specified.",
            ));
        };
        let body = match Expr::parse(body)? {
            Expr::Const(Bson::String(s)) | Expr::Const(Bson::JavaScriptCode(s)) => s,
            Expr::Const(_) => {
                return Err(Error::location(
                    31262,
                    "The body function must evaluate to type string or code",
                ))
            }
            _ => {
                return Err(Error::location(
                    31432,
                    "The body function must be a constant expression",
                ))
            }
        };
        let Some(args) = d.get("args") else {
            return Err(Error::location(31263, "The args field must be specified."));
        };
        let args = Expr::parse(args)?;
        match d.get("lang") {
            None => return Err(Error::location(31418, "The lang field must be specified.")),
            Some(Bson::String(l)) if l == "js" => {}
            Some(_) => {
                return Err(Error::location(
                    31419,
                    "Currently the only supported language specifier is 'js'.",
                ))
            }
        }
        if body.len() > crate::script::MAX_SOURCE_BYTES {
            return Err(Error::bad_value(format!(
                "$function body of {} bytes exceeds the limit of {} bytes",
                body.len(),
                crate::script::MAX_SOURCE_BYTES
            )));
        }
        Ok(Expr::Function {
            body: std::sync::Arc::from(body.as_str()),
            args: Box::new(args),
        })
    }

    fn parse_date_part(name: &str, arg: &Bson) -> Result<Expr> {
        if let Bson::Document(d) = arg {
            if d.keys().next().is_some_and(|k| !k.starts_with('$')) {
                let mut out = Vec::new();
                for (k, v) in d {
                    match k.as_str() {
                        "date" | "timezone" => out.push((k.clone(), Expr::parse(v)?)),
                        _ => {
                            return Err(Error::location(
                                40535,
                                format!("unrecognized option to {name}: \"{k}\""),
                            ))
                        }
                    }
                }
                if !d.contains_key("date") {
                    return Err(Error::location(
                        40539,
                        format!(
                            "missing 'date' argument to {name}, provided: {}",
                            util::show(arg)
                        ),
                    ));
                }
                return Ok(Expr::Named(name.to_string(), out));
            }
        }
        let raw = positional(arg);
        if raw.len() != 1 {
            return Err(Error::location(
                16020,
                format!(
                    "Expression {name} takes exactly 1 arguments. {} were passed in.",
                    raw.len()
                ),
            ));
        }
        Ok(Expr::Named(
            name.to_string(),
            vec![("date".into(), Expr::parse(raw[0])?)],
        ))
    }

    fn parse_let(arg: &Bson) -> Result<Expr> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                16874,
                "$let only supports an object as its argument",
            ));
        };
        let mut vars = None;
        let mut body = None;
        for (k, v) in d {
            match k.as_str() {
                "vars" => {
                    let Bson::Document(vd) = v else {
                        return Err(Error::location(
                            10065,
                            "invalid parameter: expected an object (vars)",
                        ));
                    };
                    let mut list = Vec::new();
                    for (n, e) in vd {
                        validate_variable_name(n)?;
                        list.push((n.clone(), Expr::parse(e)?));
                    }
                    vars = Some(list);
                }
                "in" => body = Some(Expr::parse(v)?),
                _ => {
                    return Err(Error::location(
                        16875,
                        format!("Unrecognized parameter to $let: {k}"),
                    ))
                }
            }
        }
        let vars =
            vars.ok_or_else(|| Error::location(16876, "Missing 'vars' parameter to $let"))?;
        let body = body.ok_or_else(|| Error::location(16877, "Missing 'in' parameter to $let"))?;
        Ok(Expr::Let(vars, Box::new(body)))
    }

    fn parse_map(arg: &Bson) -> Result<Expr> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                16878,
                "$map only supports an object as its argument",
            ));
        };
        let (mut input, mut var, mut body) = (None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(Expr::parse(v)?),
                "as" => var = Some(var_name(v, "$map")?),
                "in" => body = Some(Expr::parse(v)?),
                _ => {
                    return Err(Error::location(
                        16879,
                        format!("Unrecognized parameter to $map: {k}"),
                    ))
                }
            }
        }
        let input =
            input.ok_or_else(|| Error::location(16880, "Missing 'input' parameter to $map"))?;
        let body = body.ok_or_else(|| Error::location(16882, "Missing 'in' parameter to $map"))?;
        Ok(Expr::Map {
            input: Box::new(input),
            var: var.unwrap_or_else(|| "this".into()),
            body: Box::new(body),
        })
    }

    fn parse_filter(arg: &Bson) -> Result<Expr> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                28646,
                "$filter only supports an object as its argument",
            ));
        };
        let (mut input, mut var, mut cond, mut limit) = (None, None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(Expr::parse(v)?),
                "as" => var = Some(var_name(v, "$filter")?),
                "cond" => cond = Some(Expr::parse(v)?),
                "limit" => limit = Some(Box::new(Expr::parse(v)?)),
                _ => {
                    return Err(Error::location(
                        28647,
                        format!("Unrecognized parameter to $filter: {k}"),
                    ))
                }
            }
        }
        let input =
            input.ok_or_else(|| Error::location(28648, "Missing 'input' parameter to $filter"))?;
        let cond =
            cond.ok_or_else(|| Error::location(28650, "Missing 'cond' parameter to $filter"))?;
        Ok(Expr::Filter {
            input: Box::new(input),
            var: var.unwrap_or_else(|| "this".into()),
            cond: Box::new(cond),
            limit,
        })
    }

    fn parse_reduce(arg: &Bson) -> Result<Expr> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                40075,
                format!(
                    "$reduce requires an object as an argument, found: {}",
                    util::type_name(arg)
                ),
            ));
        };
        let (mut input, mut initial, mut body) = (None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(Expr::parse(v)?),
                "initialValue" => initial = Some(Expr::parse(v)?),
                "in" => body = Some(Expr::parse(v)?),
                _ => {
                    return Err(Error::location(
                        40076,
                        format!("$reduce found an unknown argument: {k}"),
                    ))
                }
            }
        }
        let input = input
            .ok_or_else(|| Error::location(40077, "$reduce requires 'input' to be specified"))?;
        let initial = initial.ok_or_else(|| {
            Error::location(40078, "$reduce requires 'initialValue' to be specified")
        })?;
        let body =
            body.ok_or_else(|| Error::location(40079, "$reduce requires 'in' to be specified"))?;
        Ok(Expr::Reduce {
            input: Box::new(input),
            initial: Box::new(initial),
            body: Box::new(body),
        })
    }

    fn parse_switch(arg: &Bson) -> Result<Expr> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                40060,
                format!(
                    "$switch requires an object as an argument, found: {}",
                    util::type_name(arg)
                ),
            ));
        };
        let mut branches = Vec::new();
        let mut default = None;
        for (k, v) in d {
            match k.as_str() {
                "branches" => {
                    let Bson::Array(arr) = v else {
                        return Err(Error::location(
                            40061,
                            format!(
                                "$switch expected an array for 'branches', found: {}",
                                util::type_name(v)
                            ),
                        ));
                    };
                    for b in arr {
                        let Bson::Document(bd) = b else {
                            return Err(Error::location(
                                40062,
                                format!(
                                    "$switch expected each branch to be an object, found: {}",
                                    util::type_name(b)
                                ),
                            ));
                        };
                        let (mut case, mut then) = (None, None);
                        for (bk, bv) in bd {
                            match bk.as_str() {
                                "case" => case = Some(Expr::parse(bv)?),
                                "then" => then = Some(Expr::parse(bv)?),
                                _ => {
                                    return Err(Error::location(
                                        40063,
                                        format!(
                                            "$switch found an unknown argument to a branch: {bk}"
                                        ),
                                    ))
                                }
                            }
                        }
                        let case = case.ok_or_else(|| {
                            Error::location(
                                40064,
                                "$switch requires each branch have a 'case' expression",
                            )
                        })?;
                        let then = then.ok_or_else(|| {
                            Error::location(
                                40065,
                                "$switch requires each branch have a 'then' expression.",
                            )
                        })?;
                        branches.push((case, then));
                    }
                }
                "default" => default = Some(Box::new(Expr::parse(v)?)),
                _ => {
                    return Err(Error::location(
                        40067,
                        format!("$switch found an unknown argument: {k}"),
                    ))
                }
            }
        }
        if branches.is_empty() {
            return Err(Error::location(
                40068,
                "$switch requires at least one branch.",
            ));
        }
        Ok(Expr::Switch { branches, default })
    }

    fn parse_sort_array(arg: &Bson) -> Result<Expr> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                2942500,
                "$sortArray requires an object as an argument",
            ));
        };
        let (mut input, mut sort_by) = (None, None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(Expr::parse(v)?),
                "sortBy" => {
                    let ok = match v {
                        Bson::Document(sd) => !sd.is_empty() && sd.values().all(|x| matches!(crate::compare::as_f64(x), Some(f) if f == 1.0 || f == -1.0)),
                        other => matches!(crate::compare::as_f64(other), Some(f) if f == 1.0 || f == -1.0),
                    };
                    if !ok {
                        return Err(Error::location(2942505, "$sortArray sortBy must be either 1, -1, or an object of fields with 1/-1"));
                    }
                    sort_by = Some(v.clone());
                }
                _ => {
                    return Err(Error::location(
                        2942501,
                        format!("$sortArray found an unknown argument: {k}"),
                    ))
                }
            }
        }
        let input = input.ok_or_else(|| {
            Error::location(2942502, "$sortArray requires 'input' to be specified")
        })?;
        let sort_by = sort_by.ok_or_else(|| {
            Error::location(2942503, "$sortArray requires 'sortBy' to be specified")
        })?;
        Ok(Expr::SortArray {
            input: Box::new(input),
            sort_by,
        })
    }
}

fn var_name(v: &Bson, op: &str) -> Result<String> {
    match v {
        Bson::String(s) => {
            validate_variable_name(s)?;
            Ok(s.clone())
        }
        _ => Err(Error::failed_to_parse(format!(
            "'as' in {op} must be a string"
        ))),
    }
}
