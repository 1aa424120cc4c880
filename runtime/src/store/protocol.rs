//! The wire format of PyTorch's TCPStore — its current protocol, which a connection opens
//! with VALIDATE — so jitccl and PyTorch processes can rendezvous through the same server.
//!
//! A request is one command byte followed by its arguments. Integers are fixed-width
//! little-endian; a key or value is a u64 length and then the raw bytes; a key list is a
//! u64 count and then the keys. Replies carry no command byte, and some commands have none.
//!
//! | command        | arguments                     | reply                                     |
//! |----------------|-------------------------------|-------------------------------------------|
//! | VALIDATE = 0   | u32 [`VALIDATION_MAGIC`]      | none; must be the connection's first message |
//! | SET = 1        | key, value                    | none                                      |
//! | COMPARE_SET = 2| key, expected, desired        | the key's value after the operation       |
//! | GET = 3        | key                           | value (empty if missing: clients WAIT first) |
//! | ADD = 4        | key, i64 delta                | i64 new value (stored as ASCII decimal)   |
//! | CHECK = 5      | key list                      | u8 [`READY`] or [`NOT_READY`]             |
//! | WAIT = 6       | key list                      | u8 [`STOP_WAITING`] once every key exists |
//! | GETNUMKEYS = 7 | —                             | i64 number of keys                        |
//! | DELETE_KEY = 8 | key                           | i64 keys deleted (0 or 1)                 |
//! | APPEND = 9     | key, value                    | none                                      |
//! | MULTI_GET = 10 | key list                      | one value per key                         |
//! | MULTI_SET = 11 | u64 n, n × (key, value)       | none                                      |
//! | CANCEL_WAIT = 12 | —                           | u8 [`WAIT_CANCELED`]                      |
//! | PING = 13      | u32 nonce                     | the same u32                              |
//!
//! PyTorch's newer queue commands (QUEUE_PUSH/POP/LEN) are not served: like any unknown
//! command they close the connection.
//!
//! Limits: everything a request declares is checked against the limits below as soon as
//! its length field arrives, so no length field ever sizes an allocation. They are at least
//! PyTorch's own (8 KiB keys, 8 MiB values, 128 Ki keys per command).

use thiserror::Error;

/// The u32 that follows VALIDATE.
pub const VALIDATION_MAGIC: u32 = 0x3C85_F7CE;
/// CHECK reply: every key exists.
pub const READY: u8 = 0;
/// CHECK reply: some key is missing.
pub const NOT_READY: u8 = 1;
/// WAIT reply: every key exists.
pub const STOP_WAITING: u8 = 0;
/// CANCEL_WAIT reply.
pub const WAIT_CANCELED: u8 = 1;

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 64 << 10;
/// Longest value, in bytes: sent, stored (APPEND included) or returned.
pub const MAX_VALUE_LEN: usize = 64 << 20;
/// Most keys in one CHECK, WAIT, MULTI_GET or MULTI_SET.
pub const MAX_KEYS_PER_COMMAND: usize = 128 << 10;
/// Largest request, and largest MULTI_GET reply: room for COMPARE_SET's two values.
pub const MAX_FRAME_LEN: usize = 2 * MAX_VALUE_LEN + (1 << 20);
/// Most key bytes in one WAIT (prefixes included): the server keeps a WAIT's missing keys
/// until they are set, so this bounds what one connection can make it hold.
pub const MAX_WAIT_KEY_BYTES: usize = 16 << 20;

/// The command byte (PyTorch's `QueryType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Command {
    Validate = 0,
    Set = 1,
    CompareSet = 2,
    Get = 3,
    Add = 4,
    Check = 5,
    Wait = 6,
    GetNumKeys = 7,
    DeleteKey = 8,
    Append = 9,
    MultiGet = 10,
    MultiSet = 11,
    CancelWait = 12,
    Ping = 13,
}

impl Command {
    pub fn from_byte(byte: u8) -> Option<Command> {
        use Command::*;
        Some(match byte {
            0 => Validate,
            1 => Set,
            2 => CompareSet,
            3 => Get,
            4 => Add,
            5 => Check,
            6 => Wait,
            7 => GetNumKeys,
            8 => DeleteKey,
            9 => Append,
            10 => MultiGet,
            11 => MultiSet,
            12 => CancelWait,
            13 => Ping,
            _ => return None,
        })
    }
}

/// One decoded request; keys and values borrow the connection's read buffer.
#[derive(Debug)]
pub(crate) enum Request<'a> {
    Validate { magic: u32 },
    Set { key: &'a [u8], value: &'a [u8] },
    CompareSet { key: &'a [u8], expected: &'a [u8], desired: &'a [u8] },
    Get { key: &'a [u8] },
    Add { key: &'a [u8], delta: i64 },
    Check { keys: Vec<&'a [u8]> },
    Wait { keys: Vec<&'a [u8]> },
    GetNumKeys,
    DeleteKey { key: &'a [u8] },
    Append { key: &'a [u8], value: &'a [u8] },
    MultiGet { keys: Vec<&'a [u8]> },
    MultiSet { pairs: Vec<(&'a [u8], &'a [u8])> },
    CancelWait,
    Ping { nonce: u32 },
}

/// Why the server closes a connection. There is no error reply in the protocol, so closing
/// is how a client learns its request was refused (PyTorch's server does the same).
#[derive(Debug, Error)]
pub(crate) enum ProtocolError {
    #[error("unknown command byte {0}")]
    UnknownCommand(u8),
    #[error("key of {0} bytes (limit {MAX_KEY_LEN})")]
    KeyTooLong(u64),
    #[error("value of {0} bytes (limit {MAX_VALUE_LEN})")]
    ValueTooLong(u64),
    #[error("{0} keys in one command (limit {MAX_KEYS_PER_COMMAND})")]
    TooManyKeys(u64),
    #[error("message of at least {0} bytes (limit {MAX_FRAME_LEN})")]
    FrameTooLong(u64),
    #[error("did not authenticate: {0}")]
    Unauthenticated(crate::auth::Refusal),
    #[error("first message has command byte {0}, not VALIDATE")]
    NotValidated(u8),
    #[error("VALIDATE magic {0:#010x} is not {VALIDATION_MAGIC:#010x}")]
    BadMagic(u32),
    #[error("VALIDATE after the first message")]
    RepeatedValidate,
    #[error("WAIT for at least {0} bytes of keys (limit {MAX_WAIT_KEY_BYTES})")]
    WaitTooLarge(u64),
    #[error("WAIT while the connection's previous WAIT is still pending")]
    SecondWait,
    #[error("ADD {delta} to key {key}: {reason}")]
    BadAdd { key: String, delta: i64, reason: &'static str },
    #[error("APPEND to key {key} would make its value {len} bytes (limit {MAX_VALUE_LEN})")]
    AppendTooLong { key: String, len: u64 },
    #[error("MULTI_GET reply of {0} bytes (limit {MAX_FRAME_LEN})")]
    ReplyTooLong(u64),
}

/// A key for log lines and error messages: lossy UTF-8, cut short.
pub(crate) fn show_key(key: &[u8]) -> String {
    const SHOWN: usize = 80;
    let text = String::from_utf8_lossy(&key[..key.len().min(SHOWN)]);
    if key.len() > SHOWN {
        format!("{text:?}... ({} bytes)", key.len())
    } else {
        format!("{text:?}")
    }
}

/// Decodes the request at the start of `buf`: `Ok(None)` until all of it has arrived, then
/// the request and its length in bytes. A frame may arrive in any number of pieces; the
/// caller keeps the bytes and calls again with more.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, ProtocolError> {
    let mut r = Reader { buf, pos: 0 };
    match r.request() {
        Ok(req) => Ok(Some((req, r.pos))),
        Err(Short::Incomplete) => Ok(None),
        Err(Short::Invalid(e)) => Err(e),
    }
}

/// Why decoding stopped early.
enum Short {
    Incomplete,
    Invalid(ProtocolError),
}

impl From<ProtocolError> for Short {
    fn from(e: ProtocolError) -> Short {
        Short::Invalid(e)
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn request(&mut self) -> Result<Request<'a>, Short> {
        let byte = self.take(1)?[0];
        let command = Command::from_byte(byte).ok_or(ProtocolError::UnknownCommand(byte))?;
        Ok(match command {
            Command::Validate => Request::Validate { magic: self.u32()? },
            Command::Set => Request::Set { key: self.key()?, value: self.value()? },
            Command::CompareSet => {
                Request::CompareSet { key: self.key()?, expected: self.value()?, desired: self.value()? }
            }
            Command::Get => Request::Get { key: self.key()? },
            Command::Add => Request::Add { key: self.key()?, delta: self.u64()? as i64 },
            Command::Check => Request::Check { keys: self.keys()? },
            Command::Wait => Request::Wait { keys: self.wait_keys()? },
            Command::GetNumKeys => Request::GetNumKeys,
            Command::DeleteKey => Request::DeleteKey { key: self.key()? },
            Command::Append => Request::Append { key: self.key()?, value: self.value()? },
            Command::MultiGet => Request::MultiGet { keys: self.keys()? },
            Command::MultiSet => {
                let n = self.count()?;
                // Grown as pairs arrive, never sized from the count field.
                let mut pairs = Vec::new();
                for _ in 0..n {
                    pairs.push((self.key()?, self.value()?));
                }
                Request::MultiSet { pairs }
            }
            Command::CancelWait => Request::CancelWait,
            Command::Ping => Request::Ping { nonce: self.u32()? },
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        // `n` is at most MAX_VALUE_LEN here, so the sum cannot overflow.
        let end = self.pos + n;
        if end > MAX_FRAME_LEN {
            return Err(ProtocolError::FrameTooLong(end as u64).into());
        }
        let bytes = self.buf.get(self.pos..end).ok_or(Short::Incomplete)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn sized(&mut self, limit: usize, too_long: fn(u64) -> ProtocolError) -> Result<&'a [u8], Short> {
        let len = self.u64()?;
        if len > limit as u64 {
            return Err(too_long(len).into());
        }
        self.take(len as usize)
    }

    fn key(&mut self) -> Result<&'a [u8], Short> {
        self.sized(MAX_KEY_LEN, ProtocolError::KeyTooLong)
    }

    fn value(&mut self) -> Result<&'a [u8], Short> {
        self.sized(MAX_VALUE_LEN, ProtocolError::ValueTooLong)
    }

    fn count(&mut self) -> Result<usize, Short> {
        let n = self.u64()?;
        if n > MAX_KEYS_PER_COMMAND as u64 {
            return Err(ProtocolError::TooManyKeys(n).into());
        }
        Ok(n as usize)
    }

    /// A WAIT's keys, refused as soon as those received add up past [`MAX_WAIT_KEY_BYTES`].
    fn wait_keys(&mut self) -> Result<Vec<&'a [u8]>, Short> {
        let n = self.count()?;
        let mut keys = Vec::new();
        let mut total = 0;
        for _ in 0..n {
            let key = self.key()?;
            total += key.len();
            if total > MAX_WAIT_KEY_BYTES {
                return Err(ProtocolError::WaitTooLarge(total as u64).into());
            }
            keys.push(key);
        }
        Ok(keys)
    }

    fn keys(&mut self) -> Result<Vec<&'a [u8]>, Short> {
        let n = self.count()?;
        let mut keys = Vec::new();
        for _ in 0..n {
            keys.push(self.key()?);
        }
        Ok(keys)
    }
}

/// Appending the wire encoding of each field type to a message being built.
pub(crate) trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_i64(&mut self, v: i64);
    /// A key or value: u64 length, then the bytes.
    fn put_bytes(&mut self, v: &[u8]);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_bytes(&mut self, v: &[u8]) {
        self.put_u64(v.len() as u64);
        self.extend_from_slice(v);
    }
}
