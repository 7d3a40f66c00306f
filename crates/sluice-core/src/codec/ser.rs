//! The encoder: serde's data model written in postcard's wire format (see the parent module),
//! into a `Vec` it owns. Small integers, the common case of record fields, take a short path:
//! one or two bytes appended with one capacity check, no loop.

use super::WireError;
use serde::ser::{self, Serialize};

/// Appends what it serializes to `out`.
pub(super) struct Encoder {
    pub(super) out: Vec<u8>,
}

type Result<T = ()> = std::result::Result<T, WireError>;

impl Encoder {
    #[inline(always)]
    fn varint(&mut self, v: u64) {
        if v < 0x80 {
            self.out.push(v as u8);
        } else if v < 0x4000 {
            self.out
                .extend_from_slice(&[v as u8 | 0x80, (v >> 7) as u8]);
        } else {
            self.varint_long(v);
        }
    }

    #[inline(never)]
    fn varint_long(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn varint_u128(&mut self, mut v: u128) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    #[inline(always)]
    fn len(&mut self, len: usize) {
        self.varint(len as u64);
    }

    #[inline(always)]
    fn bytes(&mut self, bytes: &[u8]) {
        self.len(bytes.len());
        self.out.extend_from_slice(bytes);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

impl ser::Serializer for &mut Encoder {
    type Ok = ();
    type Error = WireError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn is_human_readable(&self) -> bool {
        false
    }

    #[inline(always)]
    fn serialize_bool(self, v: bool) -> Result {
        self.out.push(u8::from(v));
        Ok(())
    }
    #[inline(always)]
    fn serialize_i8(self, v: i8) -> Result {
        self.out.push(v as u8);
        Ok(())
    }
    #[inline(always)]
    fn serialize_i16(self, v: i16) -> Result {
        self.varint(zigzag(i64::from(v)));
        Ok(())
    }
    #[inline(always)]
    fn serialize_i32(self, v: i32) -> Result {
        self.varint(zigzag(i64::from(v)));
        Ok(())
    }
    #[inline(always)]
    fn serialize_i64(self, v: i64) -> Result {
        self.varint(zigzag(v));
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result {
        self.varint_u128(((v << 1) ^ (v >> 127)) as u128);
        Ok(())
    }
    #[inline(always)]
    fn serialize_u8(self, v: u8) -> Result {
        self.out.push(v);
        Ok(())
    }
    #[inline(always)]
    fn serialize_u16(self, v: u16) -> Result {
        self.varint(u64::from(v));
        Ok(())
    }
    #[inline(always)]
    fn serialize_u32(self, v: u32) -> Result {
        self.varint(u64::from(v));
        Ok(())
    }
    #[inline(always)]
    fn serialize_u64(self, v: u64) -> Result {
        self.varint(v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result {
        self.varint_u128(v);
        Ok(())
    }
    #[inline(always)]
    fn serialize_f32(self, v: f32) -> Result {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    #[inline(always)]
    fn serialize_f64(self, v: f64) -> Result {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result {
        let mut buf = [0u8; 4];
        self.bytes(v.encode_utf8(&mut buf).as_bytes());
        Ok(())
    }
    #[inline(always)]
    fn serialize_str(self, v: &str) -> Result {
        self.bytes(v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result {
        self.bytes(v);
        Ok(())
    }
    #[inline(always)]
    fn serialize_none(self) -> Result {
        self.out.push(0);
        Ok(())
    }
    #[inline(always)]
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result {
        self.out.push(1);
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result {
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result {
        Ok(())
    }
    #[inline(always)]
    fn serialize_unit_variant(self, _: &'static str, index: u32, _: &'static str) -> Result {
        self.varint(u64::from(index));
        Ok(())
    }
    #[inline(always)]
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result {
        value.serialize(self)
    }
    #[inline(always)]
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        value: &T,
    ) -> Result {
        self.varint(u64::from(index));
        value.serialize(self)
    }
    #[inline(always)]
    fn serialize_seq(self, len: Option<usize>) -> Result<Self> {
        let len = len.ok_or(WireError::LengthUnknown)?;
        self.len(len);
        // Each element takes a byte or more (a `Vec<u8>` exactly one): room for them at once
        // rather than a growth every few pushes. Capped, as elements may also take none.
        self.out.reserve(len.min(1 << 16));
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple(self, _: usize) -> Result<Self> {
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self> {
        self.varint(u64::from(index));
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self> {
        self.len(len.ok_or(WireError::LengthUnknown)?);
        Ok(self)
    }
    #[inline(always)]
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self> {
        self.varint(u64::from(index));
        Ok(self)
    }
    fn collect_str<T: ?Sized + std::fmt::Display>(self, value: &T) -> Result {
        self.serialize_str(&value.to_string())
    }
}

macro_rules! elements {
    ($($trait:ident :: $method:ident),* $(,)?) => {$(
        impl ser::$trait for &mut Encoder {
            type Ok = ();
            type Error = WireError;
            #[inline(always)]
            fn $method<T: ?Sized + Serialize>(&mut self, value: &T) -> Result {
                value.serialize(&mut **self)
            }
            #[inline(always)]
            fn end(self) -> Result {
                Ok(())
            }
        }
    )*};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl ser::SerializeMap for &mut Encoder {
    type Ok = ();
    type Error = WireError;
    #[inline(always)]
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result {
        key.serialize(&mut **self)
    }
    #[inline(always)]
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result {
        Ok(())
    }
}

macro_rules! fields {
    ($($trait:ident),* $(,)?) => {$(
        impl ser::$trait for &mut Encoder {
            type Ok = ();
            type Error = WireError;
            #[inline(always)]
            fn serialize_field<T: ?Sized + Serialize>(
                &mut self,
                _: &'static str,
                value: &T,
            ) -> Result {
                value.serialize(&mut **self)
            }
            #[inline(always)]
            fn end(self) -> Result {
                Ok(())
            }
        }
    )*};
}

// Field names are not written: a struct is its fields in order.
fields!(SerializeStruct, SerializeStructVariant);
