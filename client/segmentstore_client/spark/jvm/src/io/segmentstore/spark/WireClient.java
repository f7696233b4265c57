// A blocking client for the few Pravega wire commands a batch read needs, over one plain
// TCP socket: Hello, GetStreamSegmentInfo, GetSegmentAttribute and ReadSegment, with their
// error replies turned into one IOException naming the segment. Layouts: the SDK's
// protocol/commands_*.py and /work/shared/protocol/wire-protocol.md (sections 2-6); strings
// are Java's modified UTF-8, which DataOutputStream.writeUTF/readUTF speak natively.
// Every socket read is bounded by the read timeout; frames above the protocol's maximum
// close the connection before their body is buffered. Not thread-safe: one per task.
package io.segmentstore.spark;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.UUID;

final class WireClient implements Closeable {
  static final int HELLO = -127;
  static final int READ_SEGMENT = 9;
  static final int SEGMENT_READ = 10;
  static final int GET_INFO = 11;
  static final int INFO = 12;
  static final int GET_ATTRIBUTE = 34;
  static final int ATTRIBUTE = 35;
  static final int WIRE_VERSION = 17;
  static final int OLDEST_VERSION = 5;
  static final int MAX_FRAME = 0x00FFFFFF;
  static final long NULL_ATTRIBUTE = Long.MIN_VALUE;

  /** A segment's state as GetStreamSegmentInfo reports it. */
  static final class Info {
    final long startOffset;
    final long length;
    final boolean sealed;

    Info(long startOffset, long length, boolean sealed) {
      this.startOffset = startOffset;
      this.length = length;
      this.sealed = sealed;
    }
  }

  /** One SegmentRead reply: the bytes at {@code offset}, {@code frame[from, from + length)}. */
  static final class Chunk {
    final long offset;
    final boolean atTail;
    final boolean endOfSegment;
    final byte[] frame;
    final int from;
    final int length;

    Chunk(long offset, boolean atTail, boolean endOfSegment, byte[] frame, int from, int length) {
      this.offset = offset;
      this.atTail = atTail;
      this.endOfSegment = endOfSegment;
      this.frame = frame;
      this.from = from;
      this.length = length;
    }

    byte[] bytes() {
      return java.util.Arrays.copyOfRange(frame, from, from + length);
    }
  }

  private final String endpoint;
  private final int timeoutMillis;
  private final Socket socket;
  private final DataInputStream in;
  private final DataOutputStream out;
  private long nextId = 1;
  private byte[] lastFrame = new byte[0]; // the payload expect() returned last

  WireClient(ReadOptions o) throws IOException {
    this.endpoint = o.endpoint();
    this.timeoutMillis = o.timeoutMillis;
    Socket s = new Socket();
    try {
      s.setTcpNoDelay(true);
      s.setReceiveBufferSize(4 << 20);
      s.connect(new InetSocketAddress(o.host, o.port), o.connectTimeoutMillis);
      s.setSoTimeout(o.timeoutMillis);
    } catch (IOException e) {
      s.close();
      throw new IOException(
          "segmentstore-jvm: cannot connect to " + endpoint + ": " + e.getMessage(), e);
    }
    this.socket = s;
    this.in = new DataInputStream(new BufferedInputStream(s.getInputStream(), 1 << 16));
    this.out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream(), 1 << 12));
    ByteArrayOutputStream hello = new ByteArrayOutputStream();
    DataOutputStream h = new DataOutputStream(hello);
    h.writeInt(WIRE_VERSION);
    h.writeInt(OLDEST_VERSION);
    send(HELLO, hello.toByteArray());
    flush();
  }

  /** GetStreamSegmentInfo; a missing segment is an IOException naming it. */
  Info info(String segment) throws IOException {
    long id = nextId++;
    Payload p = new Payload();
    p.out.writeLong(id);
    p.out.writeUTF(segment);
    p.out.writeUTF("");
    send(GET_INFO, p.bytes());
    flush();
    DataInputStream r = expect(INFO, id, segment, -1);
    r.readLong();
    r.readUTF();
    boolean exists = r.readBoolean();
    boolean sealed = r.readBoolean();
    boolean deleted = r.readBoolean();
    r.readLong(); // last modified
    long length = r.readLong();
    long start = r.available() >= 8 ? r.readLong() : 0;
    if (!exists || deleted) {
      throw new IOException("segmentstore-jvm: segment '" + segment + "' does not exist");
    }
    return new Info(start, length, sealed);
  }

  /** GetSegmentAttribute: the value, or {@link #NULL_ATTRIBUTE} when unset. */
  long attribute(String segment, UUID attribute) throws IOException {
    long id = nextId++;
    Payload p = new Payload();
    p.out.writeLong(id);
    p.out.writeUTF(segment);
    p.out.writeLong(attribute.getMostSignificantBits());
    p.out.writeLong(attribute.getLeastSignificantBits());
    p.out.writeUTF("");
    send(GET_ATTRIBUTE, p.bytes());
    flush();
    DataInputStream r = expect(ATTRIBUTE, id, segment, -1);
    r.readLong();
    return r.readLong();
  }

  /** Sends a ReadSegment and returns its request id; {@link #readReply} collects it. */
  long requestRead(String segment, long offset, int length) throws IOException {
    long id = nextId++;
    Payload p = new Payload();
    p.out.writeUTF(segment);
    p.out.writeLong(offset);
    p.out.writeInt(length);
    p.out.writeUTF("");
    p.out.writeLong(id);
    send(READ_SEGMENT, p.bytes());
    flush();
    return id;
  }

  /** The SegmentRead answering request {@code id} (replies come in request order here). */
  Chunk readReply(String segment, long id, long offset) throws IOException {
    DataInputStream r = expect(SEGMENT_READ, id, segment, offset);
    r.readUTF();
    long at = r.readLong();
    boolean tail = r.readBoolean();
    boolean end = r.readBoolean();
    int n = r.readInt();
    if (n < 0 || n > r.available()) {
      throw protocol("a SegmentRead whose data length " + n + " exceeds its frame");
    }
    if (at != offset) {
      throw protocol("a SegmentRead at offset " + at + " for a read at " + offset);
    }
    return new Chunk(at, tail, end, lastFrame, lastFrame.length - r.available(), n);
  }

  private DataInputStream expect(int type, long id, String segment, long offset)
      throws IOException {
    // Replies to other requests cannot arrive: this client has one request in flight per
    // kind and reads replies in order. KeepAlive (100) frames are skipped.
    for (int i = 0; i < 1000; i++) {
      int t;
      int len;
      byte[] body;
      try {
        t = in.readInt();
        len = in.readInt();
        if (len < 0 || len > MAX_FRAME) {
          throw protocol("a frame of type " + t + " declaring " + len + " bytes");
        }
        body = new byte[len];
        in.readFully(body);
      } catch (SocketTimeoutException e) {
        throw new IOException(
            "segmentstore-jvm: no reply from " + endpoint + " within " + timeoutMillis
                + " ms (segment '" + segment + "')", e);
      } catch (EOFException e) {
        throw new IOException(
            "segmentstore-jvm: " + endpoint + " closed the connection (segment '"
                + segment + "')", e);
      }
      if (t == HELLO || t == 100) {
        continue;
      }
      DataInputStream r = new DataInputStream(new ByteArrayInputStream(body));
      if (t == type) {
        lastFrame = body;
        return r;
      }
      throw ReplyErrors.of(t, r, segment, offset, endpoint);
    }
    throw protocol("more than 1000 frames without the reply");
  }

  private IOException protocol(String what) {
    return new IOException("segmentstore-jvm: " + endpoint + " sent " + what);
  }

  private void send(int type, byte[] payload) throws IOException {
    out.writeInt(type);
    out.writeInt(payload.length);
    out.write(payload);
  }

  private void flush() throws IOException {
    out.flush();
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }

  private static final class Payload {
    final ByteArrayOutputStream buf = new ByteArrayOutputStream(64);
    final DataOutputStream out = new DataOutputStream(buf);

    byte[] bytes() {
      return buf.toByteArray();
    }
  }
}
