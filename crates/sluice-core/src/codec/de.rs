//! The decoder: postcard's wire format (see the parent module) read back into serde's data
//! model, borrowing strings and bytes from the input where the type allows. Like postcard, it
//! needs the type to drive it: `deserialize_any`, identifiers and ignored values are refused.
//! One- and two-byte varints, the common case of record fields, take a short path.

use super::WireError;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

/// Reads from the front of `input`.
pub(super) struct Decoder<'de> {
    pub(super) input: &'de [u8],
}

type Result<T> = std::result::Result<T, WireError>;

impl<'de> Decoder<'de> {
    #[inline(always)]
    fn byte(&mut self) -> Result<u8> {
        match self.input {
            [b, rest @ ..] => {
                self.input = rest;
                Ok(*b)
            }
            [] => Err(WireError::Eof),
        }
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&'de [u8]> {
        if n > self.input.len() {
            return Err(WireError::Eof);
        }
        let (head, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(head)
    }

    /// A varint of at most `max_bytes` bytes whose value fits in `bits` bits.
    #[inline(always)]
    fn varint(&mut self, max_bytes: usize, bits: u32) -> Result<u64> {
        match self.input {
            [b, rest @ ..] if *b < 0x80 => {
                self.input = rest;
                Ok(u64::from(*b))
            }
            [b0, b1, rest @ ..] if *b1 < 0x80 && bits >= 14 => {
                self.input = rest;
                Ok(u64::from(*b0 & 0x7f) | u64::from(*b1) << 7)
            }
            _ => self.varint_long(max_bytes, bits),
        }
    }

    #[inline(never)]
    fn varint_long(&mut self, max_bytes: usize, bits: u32) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..max_bytes {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                // The last byte may not carry bits beyond the type's width.
                if i == max_bytes - 1 && u32::from(b) >> (bits - 7 * i as u32) != 0 {
                    return Err(WireError::BadVarint);
                }
                return Ok(value);
            }
        }
        Err(WireError::BadVarint)
    }

    fn varint_u128(&mut self) -> Result<u128> {
        let mut value = 0u128;
        for i in 0..19 {
            let b = self.byte()?;
            value |= u128::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if i == 18 && b > 0x03 {
                    return Err(WireError::BadVarint);
                }
                return Ok(value);
            }
        }
        Err(WireError::BadVarint)
    }

    #[inline(always)]
    fn u16(&mut self) -> Result<u16> {
        Ok(self.varint(3, 16)? as u16)
    }
    #[inline(always)]
    fn u32(&mut self) -> Result<u32> {
        Ok(self.varint(5, 32)? as u32)
    }
    #[inline(always)]
    fn u64(&mut self) -> Result<u64> {
        self.varint(10, 64)
    }
    #[inline(always)]
    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.u64()?).map_err(|_| WireError::BadVarint)
    }

    #[inline(always)]
    fn bytes(&mut self) -> Result<&'de [u8]> {
        let n = self.len()?;
        self.take(n)
    }

    #[inline(always)]
    fn str(&mut self) -> Result<&'de str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError::BadUtf8)
    }
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = WireError;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(WireError::NeedsType("deserialize_any"))
    }
    #[inline(always)]
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.byte()? {
            0 => visitor.visit_bool(false),
            1 => visitor.visit_bool(true),
            other => Err(WireError::BadBool(other)),
        }
    }
    #[inline(always)]
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_i8(self.byte()? as i8)
    }
    #[inline(always)]
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_i16(unzigzag(u64::from(self.u16()?)) as i16)
    }
    #[inline(always)]
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_i32(unzigzag(u64::from(self.u32()?)) as i32)
    }
    #[inline(always)]
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_i64(unzigzag(self.u64()?))
    }
    fn deserialize_i128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let v = self.varint_u128()?;
        visitor.visit_i128((v >> 1) as i128 ^ -((v & 1) as i128))
    }
    #[inline(always)]
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u8(self.byte()?)
    }
    #[inline(always)]
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u16(self.u16()?)
    }
    #[inline(always)]
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u32(self.u32()?)
    }
    #[inline(always)]
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u64(self.u64()?)
    }
    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_u128(self.varint_u128()?)
    }
    #[inline(always)]
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let b = self.take(4)?;
        visitor.visit_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    #[inline(always)]
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        visitor.visit_f64(f64::from_le_bytes(a))
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let n = self.len()?;
        if n > 4 {
            return Err(WireError::BadChar);
        }
        let s = std::str::from_utf8(self.take(n)?).map_err(|_| WireError::BadChar)?;
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => visitor.visit_char(c),
            _ => Err(WireError::BadChar),
        }
    }
    #[inline(always)]
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_borrowed_str(self.str()?)
    }
    #[inline(always)]
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_borrowed_bytes(self.bytes()?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_bytes(visitor)
    }
    #[inline(always)]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.byte()? {
            0 => visitor.visit_none(),
            1 => visitor.visit_some(self),
            other => Err(WireError::BadOption(other)),
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_unit()
    }
    #[inline(always)]
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }
    #[inline(always)]
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let len = self.len()?;
        visitor.visit_seq(Counted {
            decoder: self,
            left: len,
        })
    }
    #[inline(always)]
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        visitor.visit_seq(Counted {
            decoder: self,
            left: len,
        })
    }
    #[inline(always)]
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_tuple(len, visitor)
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let len = self.len()?;
        visitor.visit_map(Counted {
            decoder: self,
            left: len,
        })
    }
    #[inline(always)]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_tuple(fields.len(), visitor)
    }
    #[inline(always)]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(WireError::NeedsType("deserialize_identifier"))
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(WireError::NeedsType("deserialize_ignored_any"))
    }
}

/// The elements of a sequence, tuple or struct, or the entries of a map, of known number.
struct Counted<'a, 'de> {
    decoder: &'a mut Decoder<'de>,
    left: usize,
}

impl<'de> Counted<'_, 'de> {
    #[inline(always)]
    fn next<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.decoder).map(Some)
    }

    /// Never more than the input could hold (one byte each at least), so that a corrupt length
    /// cannot make a visitor reserve a huge buffer.
    fn size_hint(&self) -> Option<usize> {
        Some(self.left.min(self.decoder.input.len()))
    }
}

impl<'de> de::SeqAccess<'de> for Counted<'_, 'de> {
    type Error = WireError;

    #[inline(always)]
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        self.next(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        Counted::size_hint(self)
    }
}

impl<'de> de::MapAccess<'de> for Counted<'_, 'de> {
    type Error = WireError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        self.next(seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.decoder)
    }

    fn size_hint(&self) -> Option<usize> {
        Counted::size_hint(self)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Decoder<'de> {
    type Error = WireError;
    type Variant = Self;

    #[inline(always)]
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self)> {
        let index = self.u32()?;
        let value = seed.deserialize(index.into_deserializer())?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Decoder<'de> {
    type Error = WireError;

    fn unit_variant(self) -> Result<()> {
        Ok(())
    }
    #[inline(always)]
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        de::Deserializer::deserialize_tuple(self, fields.len(), visitor)
    }
}
