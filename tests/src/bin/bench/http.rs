//! A minimal blocking HTTP/1.1 keep-alive client, just enough for the reference server:
//! one request at a time, Content-Length or chunked bodies, bodiless 1xx/204/304.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct HttpConn {
    w: TcpStream,
    r: BufReader<TcpStream>,
    host: String,
    req: Vec<u8>,
    line: String,
    /// Header lines (`Name: value`) sent with every request.
    extra: Vec<String>,
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl HttpConn {
    pub fn new(stream: TcpStream, host: &str) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        // Bounded waits: a stuck server fails the run instead of hanging it.
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.set_write_timeout(Some(Duration::from_secs(60)))?;
        let r = BufReader::with_capacity(64 * 1024, stream.try_clone()?);
        Ok(HttpConn {
            w: stream,
            r,
            host: host.into(),
            req: Vec::with_capacity(1024),
            line: String::new(),
            extra: Vec::new(),
        })
    }

    pub fn connect(addr: &str) -> io::Result<Self> {
        HttpConn::new(TcpStream::connect(addr)?, addr)
    }

    /// Sends `Name: value` with every request from now on.
    pub fn always_send(&mut self, header: String) {
        self.extra.push(header);
    }

    /// Sends one request (head and body in a single write) and reads the whole response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> io::Result<Response> {
        self.req.clear();
        write!(
            self.req,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n",
            self.host
        )?;
        if let Some(ct) = content_type {
            write!(self.req, "Content-Type: {ct}\r\n")?;
        }
        for h in &self.extra {
            write!(self.req, "{h}\r\n")?;
        }
        if !body.is_empty() || method == "POST" || method == "PUT" {
            write!(self.req, "Content-Length: {}\r\n", body.len())?;
        }
        self.req.extend_from_slice(b"\r\n");
        self.req.extend_from_slice(body);
        self.w.write_all(&self.req)?;
        self.read_response(method == "HEAD")
    }

    fn read_line(&mut self) -> io::Result<&str> {
        self.line.clear();
        if self.r.read_line(&mut self.line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by server",
            ));
        }
        Ok(self.line.trim_end_matches(['\r', '\n']))
    }

    fn read_response(&mut self, head_only: bool) -> io::Result<Response> {
        let status_line = self.read_line()?.to_string();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let l = self.read_line()?;
            if l.is_empty() {
                break;
            }
            let (k, v) = l
                .split_once(':')
                .ok_or_else(|| bad(format!("bad header {l:?}")))?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let mut resp = Response {
            status,
            headers,
            body: Vec::new(),
        };
        if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
            return Ok(resp);
        }
        if let Some(len) = resp.header("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| bad(format!("bad content-length {len:?}")))?;
            resp.body.resize(len, 0);
            self.r.read_exact(&mut resp.body)?;
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
        {
            resp.body = self.read_chunked()?;
        }
        // Anything else would be "read until close", which keep-alive use never needs here.
        Ok(resp)
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let size_line = self.read_line()?;
            let hex = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(hex, 16)
                .map_err(|_| bad(format!("bad chunk size {hex:?}")))?;
            if size == 0 {
                // Trailers, then the empty line.
                while !self.read_line()?.is_empty() {}
                return Ok(body);
            }
            let start = body.len();
            body.resize(start + size, 0);
            self.r.read_exact(&mut body[start..])?;
            self.read_line()?; // the CRLF after the chunk
        }
    }
}
