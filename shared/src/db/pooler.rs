//! Connections that work through a transaction-mode pooler (PgBouncer before 1.21, which keeps
//! no prepared statements across transactions; others like it).
//!
//! Behind such a pooler a client's consecutive `Sync`-delimited exchanges may reach different
//! server connections, so a statement prepared in one exchange (`Parse` with a name) is missing
//! in the next (`Bind` to that name), and names from different clients collide. tokio-postgres
//! (under diesel-async) always prepares named statements. This adapter sits between it and the
//! socket and rewrites the frontend stream so that every exchange stands alone:
//!
//! - `Parse` of a named statement is sent as a `Parse` of the unnamed statement, and its text
//!   and parameter types are remembered under the name;
//! - `Bind` (or `Describe`) of a remembered name is preceded by a `Parse` of the unnamed statement
//!   from what was remembered, in the same exchange, and names the unnamed statement; the
//!   server's `ParseComplete` for that injected `Parse` is taken out of the backend stream;
//! - `Close` of a named statement forgets it (and closes the unnamed one, harmlessly).
//!
//! The client keeps its statement cache, so a query costs one round trip as before; the server
//! parses it each time (as it would an unprepared query). What the adapter must know of the
//! backend stream is which `ParseComplete` to drop: it counts exchanges (each `Sync` or simple
//! `Query` gets one `ReadyForQuery`, except a `Sync` sent while a `COPY ... FROM STDIN` runs,
//! which the server ignores), and forgets an exchange's pending parses when it fails (the server
//! skips the rest of an exchange after an error).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Frontend bytes held before the socket takes them; past this, writes wait.
const MAX_PENDING_OUT: usize = 256 * 1024;
/// A statement text or message larger than this is refused (a corrupt length must not make the
/// adapter buffer without bound); Postgres' own limit on a message is 1 GiB.
const MAX_MESSAGE: usize = 1 << 30;

/// One exchange sent and not yet answered with `ReadyForQuery`.
#[derive(Debug, Default)]
struct Exchange {
    /// For each `Parse` in it, in order: whether the adapter injected it (its `ParseComplete`
    /// is dropped).
    parses: VecDeque<bool>,
    /// Ended by `Sync` (the extended protocol) rather than a simple `Query`.
    extended: bool,
}

/// The adapter around a socket `S`.
pub struct Unnamed<S> {
    inner: S,
    /// Frontend bytes received from the client, not yet whole messages.
    from_client: BytesMut,
    /// Rewritten frontend bytes waiting for the socket.
    to_server: BytesMut,
    /// The startup message (untyped) has been passed on.
    started: bool,
    /// Named statements: the `Parse` body after the name (text, parameter types).
    statements: HashMap<Vec<u8>, Vec<u8>>,
    /// The exchange being written (not yet ended by `Sync`/`Query`), and the name its last
    /// `Parse` gave (a `Describe` right after needs no re-parse).
    open: Exchange,
    parsed_in_open: Option<Vec<u8>>,
    /// Exchanges sent, oldest (the one the server answers now) first.
    sent: VecDeque<Exchange>,
    /// The current exchange entered `COPY ... FROM STDIN`: the `Sync` sent after its `Execute`
    /// is ignored by the server, so one `ReadyForQuery` ends two exchanges.
    copy_in: bool,
    /// Backend bytes read from the socket, not yet whole messages.
    from_server: BytesMut,
    /// Backend bytes ready for the client.
    to_client: BytesMut,
}

impl<S> Unnamed<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            from_client: BytesMut::new(),
            to_server: BytesMut::new(),
            started: false,
            statements: HashMap::new(),
            open: Exchange::default(),
            parsed_in_open: None,
            sent: VecDeque::new(),
            copy_in: false,
            from_server: BytesMut::new(),
            to_client: BytesMut::new(),
        }
    }

    /// Named statements remembered now (for tests and metrics).
    pub fn remembered(&self) -> usize {
        self.statements.len()
    }

    /// Rewrites every whole frontend message in `from_client` into `to_server`.
    fn rewrite_frontend(&mut self) -> io::Result<()> {
        loop {
            if !self.started {
                // StartupMessage (or an SSL/GSS request): [len i32][...], no type byte.
                let Some(len) = peek_len(&self.from_client, 0)? else { return Ok(()) };
                if self.from_client.len() < len {
                    return Ok(());
                }
                if len < 8 {
                    return Err(invalid("a startup message too short"));
                }
                let msg = self.from_client.split_to(len);
                let code = (&msg[4..8]).get_i32();
                // 80877103: SSLRequest, 80877104: GSSENCRequest; the startup message follows.
                if code != 80877103 && code != 80877104 {
                    self.started = true;
                }
                self.to_server.extend_from_slice(&msg);
                continue;
            }
            if self.from_client.len() < 5 {
                return Ok(());
            }
            let Some(len) = peek_len(&self.from_client, 1)? else { return Ok(()) };
            if self.from_client.len() < 1 + len {
                return Ok(());
            }
            let mut msg = self.from_client.split_to(1 + len);
            let kind = msg[0];
            let body = msg.split_off(5);
            match kind {
                b'P' => self.parse(&body)?,
                b'B' => self.bind(&body)?,
                b'D' => self.describe(&body)?,
                b'C' => self.close(&body)?,
                b'S' => {
                    self.to_server.extend_from_slice(&msg);
                    self.to_server.extend_from_slice(&body);
                    self.end_exchange(true);
                }
                b'Q' => {
                    self.to_server.extend_from_slice(&msg);
                    self.to_server.extend_from_slice(&body);
                    self.end_exchange(false);
                }
                _ => {
                    self.to_server.extend_from_slice(&msg);
                    self.to_server.extend_from_slice(&body);
                }
            }
        }
    }

    fn end_exchange(&mut self, extended: bool) {
        let mut done = std::mem::take(&mut self.open);
        done.extended = extended;
        self.sent.push_back(done);
        self.parsed_in_open = None;
    }

    /// `Parse`: [name\0][text\0][n i16][oids].
    fn parse(&mut self, body: &[u8]) -> io::Result<()> {
        let (name, rest) = cstr(body)?;
        if !name.is_empty() {
            self.statements.insert(name.to_vec(), rest.to_vec());
            self.parsed_in_open = Some(name.to_vec());
        } else {
            self.parsed_in_open = None;
        }
        self.put_parse(rest, false);
        Ok(())
    }

    /// A `Parse` of the unnamed statement with `rest` (text, types) as its body.
    fn put_parse(&mut self, rest: &[u8], injected: bool) {
        self.to_server.put_u8(b'P');
        self.to_server.put_i32((4 + 1 + rest.len()) as i32);
        self.to_server.put_u8(0);
        self.to_server.extend_from_slice(rest);
        self.open.parses.push_back(injected);
    }

    /// Makes the unnamed statement `name`'s, unless the exchange's last `Parse` just did.
    fn reparse(&mut self, name: &[u8]) -> io::Result<()> {
        if self.parsed_in_open.as_deref() == Some(name) {
            return Ok(());
        }
        let rest = self
            .statements
            .get(name)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a statement the client never prepared"))?;
        self.put_parse(&rest, true);
        self.parsed_in_open = Some(name.to_vec());
        Ok(())
    }

    /// `Bind`: [portal\0][statement\0][rest].
    fn bind(&mut self, body: &[u8]) -> io::Result<()> {
        let (portal, after) = cstr(body)?;
        let (name, rest) = cstr(after)?;
        if !name.is_empty() {
            self.reparse(name)?;
        }
        self.to_server.put_u8(b'B');
        self.to_server.put_i32((4 + portal.len() + 1 + 1 + rest.len()) as i32);
        self.to_server.extend_from_slice(portal);
        self.to_server.put_u8(0);
        self.to_server.put_u8(0);
        self.to_server.extend_from_slice(rest);
        Ok(())
    }

    /// `Describe`: [S|P][name\0]; a statement's name becomes the unnamed statement.
    fn describe(&mut self, body: &[u8]) -> io::Result<()> {
        let (&what, after) = body.split_first().ok_or_else(|| invalid("an empty Describe"))?;
        let (name, _) = cstr(after)?;
        if what == b'S' && !name.is_empty() {
            self.reparse(name)?;
            self.to_server.extend_from_slice(&[b'D', 0, 0, 0, 6, b'S', 0]);
        } else {
            self.to_server.put_u8(b'D');
            self.to_server.put_i32((4 + body.len()) as i32);
            self.to_server.extend_from_slice(body);
        }
        Ok(())
    }

    /// `Close`: [S|P][name\0]; closing a named statement forgets it.
    fn close(&mut self, body: &[u8]) -> io::Result<()> {
        let (&what, after) = body.split_first().ok_or_else(|| invalid("an empty Close"))?;
        let (name, _) = cstr(after)?;
        if what == b'S' && !name.is_empty() {
            self.statements.remove(name);
            // The unnamed statement is closed below, whichever statement it held.
            self.parsed_in_open = None;
            // The client waits for a CloseComplete; closing the unnamed statement answers it.
            self.to_server.extend_from_slice(&[b'C', 0, 0, 0, 6, b'S', 0]);
        } else {
            self.to_server.put_u8(b'C');
            self.to_server.put_i32((4 + body.len()) as i32);
            self.to_server.extend_from_slice(body);
        }
        Ok(())
    }

    /// Moves every whole backend message from `from_server` to `to_client`, dropping the
    /// `ParseComplete`s of injected parses.
    fn filter_backend(&mut self) -> io::Result<()> {
        loop {
            if self.from_server.len() < 5 {
                return Ok(());
            }
            let Some(len) = peek_len(&self.from_server, 1)? else { return Ok(()) };
            if self.from_server.len() < 1 + len {
                return Ok(());
            }
            let msg = self.from_server.split_to(1 + len);
            match msg[0] {
                b'1' => {
                    let injected = self.sent.front_mut().and_then(|x| x.parses.pop_front()).unwrap_or(false);
                    if injected {
                        continue;
                    }
                }
                b'E' => {
                    // An error in an exchange: the server skips to its Sync. (An error outside one,
                    // like a FATAL at start-up, finds no exchange and changes nothing.)
                    if let Some(x) = self.sent.front_mut() {
                        x.parses.clear();
                    }
                }
                b'G' => self.copy_in = self.sent.front().is_some_and(|x| x.extended),
                b'Z' => {
                    self.sent.pop_front();
                    if std::mem::take(&mut self.copy_in) {
                        // The Sync sent after the COPY's Execute reached the server in copy
                        // mode and was ignored (whether the copy then succeeded or failed):
                        // this ReadyForQuery answers the exchange that ended the copy too.
                        self.sent.pop_front();
                    }
                }
                _ => {}
            }
            self.to_client.extend_from_slice(&msg);
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("postgres protocol: {what}"))
}

/// The length field at `at` (it counts itself), if those 4 bytes are there.
fn peek_len(buf: &[u8], at: usize) -> io::Result<Option<usize>> {
    let Some(bytes) = buf.get(at..at + 4) else { return Ok(None) };
    let len = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    match usize::try_from(len) {
        Ok(n) if (4..=MAX_MESSAGE).contains(&n) => Ok(Some(n)),
        _ => Err(invalid("a message length out of range")),
    }
}

/// A NUL-terminated string at the start of `buf`, and what follows it.
fn cstr(buf: &[u8]) -> io::Result<(&[u8], &[u8])> {
    let end = buf.iter().position(|b| *b == 0).ok_or_else(|| invalid("a string without its end"))?;
    Ok((&buf[..end], &buf[end + 1..]))
}

impl<S: AsyncWrite + Unpin> Unnamed<S> {
    /// Writes `to_server` to the socket until it is empty or the socket would block.
    fn drain_to_server(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.to_server.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.to_server))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.to_server.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Unnamed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Poll::Ready(Err(e)) = this.drain_to_server(cx) {
            return Poll::Ready(Err(e));
        }
        if this.to_server.len() >= MAX_PENDING_OUT {
            return Poll::Pending;
        }
        this.from_client.extend_from_slice(buf);
        this.rewrite_frontend()?;
        if let Poll::Ready(Err(e)) = this.drain_to_server(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain_to_server(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain_to_server(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Unnamed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.to_client.is_empty() {
                let n = this.to_client.len().min(buf.remaining());
                buf.put_slice(&this.to_client.split_to(n));
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // End of stream: whatever partial message is left is the client's to notice.
                let rest = this.from_server.split();
                this.to_client.extend_from_slice(&rest);
                if this.to_client.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.from_server.extend_from_slice(read.filled());
            this.filter_backend()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn startup() -> Vec<u8> {
        let mut body = 196608i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0gw\0\0");
        let mut m = ((4 + body.len()) as i32).to_be_bytes().to_vec();
        m.extend_from_slice(&body);
        m
    }

    fn rewrite(u: &mut Unnamed<()>, bytes: &[u8]) -> Vec<u8> {
        u.from_client.extend_from_slice(bytes);
        u.rewrite_frontend().unwrap();
        u.to_server.split().to_vec()
    }

    fn answer(u: &mut Unnamed<()>, bytes: &[u8]) -> Vec<u8> {
        u.from_server.extend_from_slice(bytes);
        u.filter_backend().unwrap();
        u.to_client.split().to_vec()
    }

    const SELECT: &[u8] = b"SELECT $1::int4\0\x00\x01\x00\x00\x00\x17";

    fn parse_named(name: &str) -> Vec<u8> {
        let mut b = name.as_bytes().to_vec();
        b.push(0);
        b.extend_from_slice(SELECT);
        msg(b'P', &b)
    }

    fn parse_unnamed() -> Vec<u8> {
        let mut b = vec![0];
        b.extend_from_slice(SELECT);
        msg(b'P', &b)
    }

    fn bind(name: &str) -> Vec<u8> {
        let mut b = vec![0];
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(b"\0\x00\x00\x00\x01\x00\x00\x00\x04\x00\x00\x00\x07\x00\x00");
        msg(b'B', &b)
    }

    fn bind_unnamed_rest() -> Vec<u8> {
        msg(b'B', b"\0\0\x00\x00\x00\x01\x00\x00\x00\x04\x00\x00\x00\x07\x00\x00")
    }

    #[test]
    fn a_prepared_statement_is_reparsed_in_the_exchange_that_runs_it() {
        let mut u = Unnamed::new(());
        let start = startup();
        assert_eq!(rewrite(&mut u, &start), start, "the startup message passes as it is");
        // Prepare: Parse(s1) + Describe(S, s1) + Sync becomes the unnamed statement's.
        let mut prepare = parse_named("s1");
        prepare.extend(msg(b'D', b"Ss1\0"));
        prepare.extend(msg(b'S', b""));
        let mut want = parse_unnamed();
        want.extend(msg(b'D', b"S\0"));
        want.extend(msg(b'S', b""));
        assert_eq!(rewrite(&mut u, &prepare), want);
        assert_eq!(u.remembered(), 1);
        // The server's answer reaches the client whole: its own Parse completed.
        let mut reply = msg(b'1', b"");
        reply.extend(msg(b't', b"\x00\x01\x00\x00\x00\x17"));
        reply.extend(msg(b'n', b""));
        reply.extend(msg(b'Z', b"I"));
        assert_eq!(answer(&mut u, &reply), reply);
        // Execute, in another exchange (perhaps on another server): Parse injected before Bind.
        let mut run = bind("s1");
        run.extend(msg(b'E', b"\0\x00\x00\x00\x00"));
        run.extend(msg(b'S', b""));
        let mut want = parse_unnamed();
        want.extend(bind_unnamed_rest());
        want.extend(msg(b'E', b"\0\x00\x00\x00\x00"));
        want.extend(msg(b'S', b""));
        assert_eq!(rewrite(&mut u, &run), want);
        // The injected Parse's completion is taken out; the rest passes.
        let mut reply = msg(b'1', b"");
        let mut rest = msg(b'2', b"");
        rest.extend(msg(b'C', b"SELECT 1\0"));
        rest.extend(msg(b'Z', b"I"));
        reply.extend(&rest);
        assert_eq!(answer(&mut u, &reply), rest);
        // Close forgets the name and closes the unnamed statement.
        let mut close = msg(b'C', b"Ss1\0");
        close.extend(msg(b'S', b""));
        let mut want = msg(b'C', b"S\0");
        want.extend(msg(b'S', b""));
        assert_eq!(rewrite(&mut u, &close), want);
        assert_eq!(u.remembered(), 0);
    }

    #[test]
    fn a_failed_exchange_forgets_its_pending_parses() {
        let mut u = Unnamed::new(());
        rewrite(&mut u, &startup());
        rewrite(&mut u, &[parse_named("s1"), msg(b'S', b"")].concat());
        answer(&mut u, &[msg(b'1', b""), msg(b'Z', b"I")].concat());
        // Two exchanges pipelined; the first one's injected Parse fails (a table dropped).
        rewrite(&mut u, &[bind("s1"), msg(b'E', b"\0\0\0\0\0"), msg(b'S', b"")].concat());
        rewrite(&mut u, &[bind("s1"), msg(b'E', b"\0\0\0\0\0"), msg(b'S', b"")].concat());
        let error = msg(b'E', b"SERROR\0\0");
        assert_eq!(answer(&mut u, &[error.clone(), msg(b'Z', b"I")].concat()), [error, msg(b'Z', b"I")].concat());
        // The second exchange's injected ParseComplete is still recognized as injected.
        let rest = [msg(b'2', b""), msg(b'C', b"SELECT 1\0"), msg(b'Z', b"I")].concat();
        assert_eq!(answer(&mut u, &[msg(b'1', b""), rest.clone()].concat()), rest);
    }

    #[test]
    fn copy_in_ends_two_exchanges_with_one_ready() {
        let mut u = Unnamed::new(());
        rewrite(&mut u, &startup());
        rewrite(&mut u, &[parse_named("s2"), msg(b'S', b"")].concat());
        answer(&mut u, &[msg(b'1', b""), msg(b'Z', b"I")].concat());
        // tokio-postgres' copy_in: Bind + Execute + Sync, then data, then CopyDone + Sync.
        rewrite(&mut u, &[bind("s2"), msg(b'E', b"\0\0\0\0\0"), msg(b'S', b"")].concat());
        rewrite(&mut u, &[msg(b'd', b"data"), msg(b'c', b""), msg(b'S', b"")].concat());
        let reply = [msg(b'2', b""), msg(b'G', b"\x01\x00\x00"), msg(b'C', b"COPY 1\0"), msg(b'Z', b"T")].concat();
        assert_eq!(answer(&mut u, &[msg(b'1', b""), reply.clone()].concat()), reply);
        // The next exchange lines up: its injected Parse's completion is dropped.
        rewrite(&mut u, &[bind("s2"), msg(b'E', b"\0\0\0\0\0"), msg(b'S', b"")].concat());
        let rest = [msg(b'2', b""), msg(b'C', b"SELECT 1\0"), msg(b'Z', b"I")].concat();
        assert_eq!(answer(&mut u, &[msg(b'1', b""), rest.clone()].concat()), rest);
        assert!(u.sent.is_empty());
    }

    #[test]
    fn messages_split_anywhere_are_rewritten_alike() {
        let mut whole = Unnamed::new(());
        let bytes =
            [startup(), parse_named("s9"), msg(b'D', b"Ss9\0"), msg(b'S', b""), bind("s9"), msg(b'S', b"")].concat();
        let want = rewrite(&mut whole, &bytes);
        for cut in 1..bytes.len() {
            let mut u = Unnamed::new(());
            let mut got = rewrite(&mut u, &bytes[..cut]);
            got.extend(rewrite(&mut u, &bytes[cut..]));
            assert_eq!(got, want, "cut at {cut}");
        }
    }

    #[test]
    fn a_bad_length_is_an_error_not_a_huge_buffer() {
        let mut u = Unnamed::new(());
        rewrite(&mut u, &startup());
        u.from_client.extend_from_slice(&[b'P', 0x7f, 0xff, 0xff, 0xff]);
        assert!(u.rewrite_frontend().is_err());
    }
}
