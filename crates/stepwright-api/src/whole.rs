//! Whole numbers in request bodies: JSON has one kind of number, and `3.0` is the integer 3
//! to JSON Schema (and to a client whose numbers are floats), so an integer field takes a
//! whole number written with a fraction; any other fraction, or a number out of the type's
//! range, is refused naming the range. For `#[serde(deserialize_with = …)]`.

use serde::Deserialize;
use serde::de::Error;

fn integer<'de, D, T>(number: &serde_json::Number) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    let whole = match (number.as_i64(), number.as_u64(), number.as_f64()) {
        (Some(n), _, _) => Some(i128::from(n)),
        (_, Some(n), _) => Some(i128::from(n)),
        #[allow(clippy::cast_possible_truncation)] // Checked whole and in range first.
        (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1.7e38 => Some(f as i128),
        _ => None,
    };
    let Some(whole) = whole else {
        return Err(D::Error::custom(format!("invalid type: {number} is not a whole number")));
    };
    T::try_from(whole).map_err(|_| {
        D::Error::custom(format!("invalid value: {whole} is out of range for {}", std::any::type_name::<T>()))
    })
}

/// A required integer.
pub fn required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    integer::<D, T>(&serde_json::Number::deserialize(deserializer)?)
}

/// An optional integer (`null` or absent: none; absent needs `#[serde(default)]`).
pub fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    Option::<serde_json::Number>::deserialize(deserializer)?.as_ref().map(integer::<D, T>).transpose()
}
