// A blocking client for the few Pravega wire commands a batch read or write needs, over
// one plain TCP socket: Hello, GetStreamSegmentInfo, GetSegmentAttribute and ReadSegment,
// and for the writer CreateSegment, SetupAppend and end-only AppendBlockEnds (sent
// without waiting; their DataAppended replies are collected in order by AppendPipe), with
// their error replies turned into one IOException naming the segment. Layouts: the SDK's
// protocol/commands_*.py and /work/shared/protocol/wire-protocol.md (sections 2-6); strings
// are Java's modified UTF-8, which DataOutputStream.writeUTF/readUTF speak natively.
// The peer is not trusted: each reply must arrive whole within the timeout (one deadline
// per reply, not per socket read), a frame above the protocol's maximum (16 MiB - 1) fails
// before its body is buffered, and a reply must answer the request it is read for (its
// request id, segment, offset, and no more bytes than asked); a short or garbled body,
// a reset or a close is an IOException naming the segment. Not thread-safe: one per task.
package io.segmentstore.spark;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.UTFDataFormatException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

final class WireClient implements Closeable {
  static final int HELLO = -127;
  static final int READ_SEGMENT = 9;
  static final int SEGMENT_READ = 10;
  static final int GET_INFO = 11;
  static final int INFO = 12;
  static final int GET_ATTRIBUTE = 34;
  static final int ATTRIBUTE = 35;
  static final int SETUP_APPEND = 1;
  static final int APPEND_SETUP = 2;
  static final int APPEND_BLOCK_END = 4;
  static final int DATA_APPENDED = 7;
  static final int CREATE_SEGMENT = 20;
  static final int SEGMENT_CREATED = 21;
  static final int SEGMENT_ALREADY_EXISTS = 52;
  static final int UPDATE_ATTRIBUTE = 36;
  static final int ATTRIBUTE_UPDATED = 37;
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

  /**
   * One SegmentRead reply: the bytes at {@code offset}, {@code frame[from, from + length)}.
   * The frame array is the client's and is reused: valid until the client reads its next
   * reply.
   */
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
  private final Deadline deadline;
  private final DataInputStream in;
  private final DataOutputStream out;
  private final Map<Long, Integer> asked = new HashMap<>(); // read request id -> length
  private long nextId = 1;
  // The payload expect() returned last: frame[0, frameLen). Reused from reply to reply
  // (from Buffers once large), so 2 MiB reads allocate no array each; recycle() gives it back.
  private static final int FRAME_BYTES = EventSource.READ_BYTES + 64 * 1024;
  private byte[] frame = new byte[0];
  private int frameLen;
  private static final AtomicInteger OPEN = new AtomicInteger();
  private final AtomicBoolean closed = new AtomicBoolean();

  WireClient(ReadOptions o) throws IOException {
    this(o.host, o.port, o.timeoutMillis, o.connectTimeoutMillis);
  }

  WireClient(String host, int port, int timeoutMillis, int connectTimeoutMillis)
      throws IOException {
    this.endpoint = host + ":" + port;
    this.timeoutMillis = timeoutMillis;
    Socket s = new Socket();
    try {
      s.setTcpNoDelay(true);
      s.setReceiveBufferSize(4 << 20);
      s.setSendBufferSize(4 << 20);
      s.connect(new InetSocketAddress(host, port), connectTimeoutMillis);
      s.setSoTimeout(timeoutMillis);
    } catch (IOException e) {
      s.close();
      throw new IOException(
          "segmentstore-jvm: cannot connect to " + endpoint + ": " + e.getMessage(), e);
    }
    this.socket = s;
    try { // a client that is not returned has no owner to close it: its socket is closed here
      this.deadline = new Deadline(s);
      this.in = new DataInputStream(new BufferedInputStream(deadline, 1 << 16));
      this.out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream(), 1 << 12));
      ByteArrayOutputStream hello = new ByteArrayOutputStream();
      DataOutputStream h = new DataOutputStream(hello);
      h.writeInt(WIRE_VERSION);
      h.writeInt(OLDEST_VERSION);
      send(HELLO, hello.toByteArray(), "(hello)");
    } catch (IOException | RuntimeException e) {
      s.close();
      throw e;
    }
    OPEN.incrementAndGet();
  }

  /** GetStreamSegmentInfo; a missing segment is an IOException naming it. */
  Info info(String segment) throws IOException {
    long id = nextId++;
    Payload p = new Payload();
    p.out.writeLong(id);
    p.out.writeUTF(segment);
    p.out.writeUTF("");
    send(GET_INFO, p.bytes(), segment);
    DataInputStream r = expect(INFO, id, segment, -1);
    try {
      checkId(r.readLong(), id, "StreamSegmentInfo", segment);
      checkSegment(r.readUTF(), segment, "StreamSegmentInfo");
      boolean exists = r.readBoolean();
      boolean sealed = r.readBoolean();
      boolean deleted = r.readBoolean();
      r.readLong(); // last modified
      long length = r.readLong();
      long start = r.available() >= 8 ? r.readLong() : 0;
      if (!exists || deleted) {
        throw new IOException("segmentstore-jvm: segment '" + segment + "' does not exist");
      }
      if (length < 0 || start < 0 || start > length) {
        throw protocol(
            "a StreamSegmentInfo with start offset " + start + " and length " + length, segment);
      }
      return new Info(start, length, sealed);
    } catch (EOFException | UTFDataFormatException e) {
      throw malformed("StreamSegmentInfo", segment, -1, e);
    }
  }

  /** GetSegmentAttribute: the value, or {@link #NULL_ATTRIBUTE} when unset. */
  long attribute(String segment, UUID attribute) throws IOException {
    long id = nextId++;
    Payload p = attributeRequest(id, segment, attribute);
    p.out.writeUTF("");
    send(GET_ATTRIBUTE, p.bytes(), segment);
    DataInputStream r = expect(ATTRIBUTE, id, segment, -1);
    try {
      checkId(r.readLong(), id, "SegmentAttribute", segment);
      return r.readLong();
    } catch (EOFException e) {
      throw malformed("SegmentAttribute", segment, -1, e);
    }
  }

  /**
   * UpdateSegmentAttribute: sets {@code attribute} to {@code value} if it holds
   * {@code expected} ({@link #NULL_ATTRIBUTE}: unset); true if it did.
   */
  boolean compareAndSetAttribute(String segment, UUID attribute, long value, long expected)
      throws IOException {
    long id = nextId++;
    Payload p = attributeRequest(id, segment, attribute);
    p.out.writeLong(value);
    p.out.writeLong(expected);
    p.out.writeUTF("");
    send(UPDATE_ATTRIBUTE, p.bytes(), segment);
    DataInputStream r = expect(ATTRIBUTE_UPDATED, id, segment, -1);
    try {
      checkId(r.readLong(), id, "SegmentAttributeUpdated", segment);
      return r.readBoolean();
    } catch (EOFException e) {
      throw malformed("SegmentAttributeUpdated", segment, -1, e);
    }
  }

  /** The fields GetSegmentAttribute and UpdateSegmentAttribute start with. */
  private static Payload attributeRequest(long id, String segment, UUID attribute)
      throws IOException {
    Payload p = new Payload();
    p.out.writeLong(id);
    p.out.writeUTF(segment);
    p.out.writeLong(attribute.getMostSignificantBits());
    p.out.writeLong(attribute.getLeastSignificantBits());
    return p;
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
    send(READ_SEGMENT, p.bytes(), segment);
    asked.put(id, length);
    return id;
  }

  /**
   * The SegmentRead answering request {@code id} (replies come in request order here): for
   * this segment, at this offset, with at most the bytes asked for, or an IOException.
   */
  Chunk readReply(String segment, long id, long offset) throws IOException {
    Integer length = asked.remove(id);
    if (length == null) {
      throw new IllegalStateException("no read request " + id + " is outstanding");
    }
    DataInputStream r = expect(SEGMENT_READ, id, segment, offset);
    try {
      checkSegment(r.readUTF(), segment, "SegmentRead");
      long at = r.readLong();
      boolean tail = r.readBoolean();
      boolean end = r.readBoolean();
      int n = r.readInt();
      if (at != offset) {
        throw protocol("a SegmentRead at offset " + at + " for a read at " + offset, segment);
      }
      if (n < 0 || n > r.available()) {
        throw malformed("SegmentRead", segment, offset,
            new EOFException("its data length " + n + " runs past its frame"));
      }
      if (n > length) {
        throw protocol(
            "a SegmentRead of " + n + " bytes at offset " + offset + ", more than the " + length
                + " asked for", segment);
      }
      int from = frameLen - r.available();
      if (r.skip(n) != n || (r.available() != 0 && r.available() < 8)) {
        throw malformed("SegmentRead", segment, offset, new EOFException("trailing bytes"));
      }
      if (r.available() >= 8) {
        checkId(r.readLong(), id, "SegmentRead", segment);
      }
      return new Chunk(at, tail, end, frame, from, n);
    } catch (EOFException | UTFDataFormatException e) {
      throw malformed("SegmentRead", segment, offset, e);
    }
  }

  private DataInputStream expect(int type, long id, String segment, long offset)
      throws IOException {
    return expect(type, type, id, segment, offset);
  }

  /** The type of the reply expect() returned last (one of its two accepted types). */
  private int replyType;

  private DataInputStream expect(int type, int alt, long id, String segment, long offset)
      throws IOException {
    // Replies to other requests cannot arrive: this client has one request in flight per
    // kind and reads replies in order. KeepAlive (100) and Hello frames are skipped. The
    // whole reply, however many frames and bytes, must arrive within the timeout.
    deadline.start(timeoutMillis);
    try {
      for (int i = 0; i < 1000; i++) {
        int t;
        int len;
        try {
          t = in.readInt();
          len = in.readInt();
          if (len < 0 || len > MAX_FRAME) {
            throw protocol("a frame of type " + t + " declaring " + len + " bytes (the "
                + "protocol's maximum is " + MAX_FRAME + ")", segment, offset);
          }
          if (len > frame.length) {
            // A large frame gets room for any read reply (2 MiB and its header), so the
            // pool holds arrays of one size for frames whatever a reply's length.
            byte[] old = frame;
            frame = Buffers.take(len < Buffers.MIN_BYTES ? len : Math.max(len, FRAME_BYTES));
            Buffers.give(old);
          }
          frameLen = 0; // frame's bytes are being replaced
          in.readFully(frame, 0, len);
          frameLen = len;
        } catch (SocketTimeoutException e) {
          throw new IOException(
              "segmentstore-jvm: no reply from " + endpoint + " within " + timeoutMillis
                  + " ms (" + where(segment, offset) + ")", e);
        } catch (EOFException e) {
          throw new IOException(
              "segmentstore-jvm: " + endpoint + " closed the connection (" + where(segment, offset)
                  + ")", e);
        } catch (SocketException e) {
          throw new IOException(
              "segmentstore-jvm: the connection to " + endpoint + " failed ("
                  + where(segment, offset) + "): " + e.getMessage(), e);
        }
        if (t == 100) {
          continue;
        }
        DataInputStream r = new DataInputStream(new ByteArrayInputStream(frame, 0, len));
        if (t == HELLO) {
          checkHello(r, segment);
          continue;
        }
        if (t == type || t == alt) {
          replyType = t;
          return r;
        }
        try {
          throw ReplyErrors.of(t, r, id, segment, offset, endpoint);
        } catch (EOFException | UTFDataFormatException e) {
          throw malformed("type-" + t, segment, offset, e);
        }
      }
      throw protocol("more than 1000 frames without the reply", segment, offset);
    } finally {
      deadline.stop();
    }
  }

  private void checkHello(DataInputStream r, String segment) throws IOException {
    try {
      int high = r.readInt();
      int low = r.readInt();
      if (high < OLDEST_VERSION || low > WIRE_VERSION || low > high) {
        throw protocol(
            "a Hello for wire versions " + low + ".." + high + ", which this reader ("
                + OLDEST_VERSION + ".." + WIRE_VERSION + ") does not speak", segment);
      }
    } catch (EOFException e) {
      throw malformed("Hello", segment, -1, e);
    }
  }

  private void checkId(long got, long id, String reply, String segment) throws IOException {
    if (got != id) {
      throw protocol(
          "a " + reply + " for request " + got + " while request " + id + " was waiting",
          segment);
    }
  }

  private void checkSegment(String got, String segment, String reply) throws IOException {
    if (!got.equals(segment)) {
      throw protocol("a " + reply + " for segment '" + got + "'", segment);
    }
  }

  static String where(String segment, long offset) {
    return "segment '" + segment + "'" + (offset >= 0 ? ", offset " + offset : "");
  }

  private IOException protocol(String what, String segment) {
    return protocol(what, segment, -1);
  }

  private IOException protocol(String what, String segment, long offset) {
    return new IOException(
        "segmentstore-jvm: " + endpoint + " sent " + what + " (" + where(segment, offset) + ")");
  }

  private IOException malformed(String reply, String segment, long offset, IOException e) {
    return new IOException(
        "segmentstore-jvm: " + endpoint + " sent a malformed " + reply + " reply ("
            + where(segment, offset) + "): " + e, e);
  }

  private void send(int type, byte[] payload, String segment) throws IOException {
    try {
      out.writeInt(type);
      out.writeInt(payload.length);
      out.write(payload);
      out.flush();
    } catch (IOException e) {
      throw new IOException(
          "segmentstore-jvm: cannot send to " + endpoint + " (segment '" + segment + "'): "
              + e.getMessage(), e);
    }
  }

  String endpointName() {
    return endpoint;
  }

  /** CreateSegment (no scaling policy): true if created, false if it already existed. */
  boolean createSegment(String segment) throws IOException {
    long id = nextId++;
    Payload p = new Payload();
    p.out.writeLong(id);
    p.out.writeUTF(segment);
    p.out.writeInt(0); // target rate
    p.out.writeByte(0); // scale type: fixed
    p.out.writeUTF("");
    p.out.writeLong(0); // rollover size: the server's default
    send(CREATE_SEGMENT, p.bytes(), segment);
    DataInputStream r = expect(SEGMENT_CREATED, SEGMENT_ALREADY_EXISTS, id, segment, -1);
    try {
      checkId(r.readLong(), id, "SegmentCreated", segment);
    } catch (EOFException e) {
      throw malformed("SegmentCreated", segment, -1, e);
    }
    return replyType == SEGMENT_CREATED;
  }

  /** SetupAppend: the last event number the server holds for {@code writer} (or <= 0). */
  long setupAppend(UUID writer, String segment) throws IOException {
    long id = nextId++;
    Payload p = new Payload();
    p.out.writeLong(id);
    p.out.writeLong(writer.getMostSignificantBits());
    p.out.writeLong(writer.getLeastSignificantBits());
    p.out.writeUTF(segment);
    p.out.writeUTF("");
    send(SETUP_APPEND, p.bytes(), segment);
    DataInputStream r = expect(APPEND_SETUP, id, segment, -1);
    try {
      checkId(r.readLong(), id, "AppendSetup", segment);
      checkSegment(r.readUTF(), segment, "AppendSetup");
      UUID got = new UUID(r.readLong(), r.readLong());
      if (!got.equals(writer)) {
        throw protocol("an AppendSetup for writer " + got + " (set up: " + writer + ")", segment);
      }
      return r.readLong();
    } catch (EOFException | UTFDataFormatException e) {
      throw malformed("AppendSetup", segment, -1, e);
    }
  }

  /**
   * Sends one event as an end-only AppendBlockEnd without waiting for its DataAppended
   * ({@link #appended} reads it); returns the request id. The write is bounded by the
   * timeout: a peer that stops reading gets the socket closed under the blocked write.
   */
  long sendAppend(UUID writer, String segment, byte[] event, long eventNumber)
      throws IOException {
    long id = nextId++;
    ByteBuffer head = ByteBuffer.allocate(8 + 16 + 4 + 4 + 8);
    int records = 8 + event.length;
    head.putInt(APPEND_BLOCK_END).putInt(16 + 4 + 4 + records + 4 + 8 + 8);
    head.putLong(writer.getMostSignificantBits()).putLong(writer.getLeastSignificantBits());
    head.putInt(records).putInt(records); // sizeOfWholeEvents, then the data's length
    head.putInt(0).putInt(event.length); // the Event record's header
    ByteBuffer tail = ByteBuffer.allocate(20);
    tail.putInt(1).putLong(eventNumber).putLong(id);
    ScheduledFuture<?> watchdog =
        WATCHDOG.schedule(this::starve, timeoutMillis, TimeUnit.MILLISECONDS);
    IOException failed = null;
    try {
      out.write(head.array());
      out.write(event);
      out.write(tail.array());
      out.flush();
    } catch (IOException e) {
      failed = e;
    }
    // A watchdog that fired (even as the write finished) has closed the socket: that is
    // the reason to report, here or at the next send, never a bare "Socket closed".
    watchdog.cancel(false);
    if (failed != null || starved) {
      String why = starved
          ? "the server took no data for " + timeoutMillis + " ms"
          : failed.getMessage();
      throw new IOException(
          "segmentstore-jvm: cannot send to " + endpoint + " (segment '" + segment + "'): "
              + why, failed);
    }
    return id;
  }

  private volatile boolean starved; // the write watchdog closed the socket

  private void starve() {
    starved = true;
    closeQuietly();
  }

  /** The DataAppended answering append request {@code id}: its event number. */
  long appended(UUID writer, String segment, long id) throws IOException {
    DataInputStream r = expect(DATA_APPENDED, id, segment, -1);
    try {
      UUID got = new UUID(r.readLong(), r.readLong());
      long number = r.readLong();
      if (!got.equals(writer)) {
        throw protocol("a DataAppended for writer " + got + " (writing: " + writer + ")", segment);
      }
      if (r.available() >= 16) {
        r.readLong(); // previous event number
        checkId(r.readLong(), id, "DataAppended", segment);
      }
      return number;
    } catch (EOFException e) {
      throw malformed("DataAppended", segment, -1, e);
    }
  }

  // One daemon thread for every client of the JVM. A cancelled watchdog leaves the queue
  // at once: by default it stayed there until its delay ran out, one task per append for
  // `timeout` (60 s), so a write of 1 M tiny events kept ~70 MB of them on the heap.
  private static final ScheduledThreadPoolExecutor WATCHDOG = watchdog();

  private static ScheduledThreadPoolExecutor watchdog() {
    ScheduledThreadPoolExecutor e = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = new Thread(r, "segmentstore-jvm-write-watchdog");
      t.setDaemon(true);
      return t;
    });
    e.setRemoveOnCancelPolicy(true);
    return e;
  }

  /** Watchdogs scheduled and not yet cancelled or run, in this JVM (for tests). */
  static int watchdogsQueued() {
    return WATCHDOG.getQueue().size();
  }

  private void closeQuietly() {
    try {
      socket.close();
    } catch (IOException e) {
      // closing is the point; nothing more to do
    }
  }

  /**
   * Closes the socket (any thread, any number of times). Every client made must be closed
   * by its owner, even after the write watchdog closed its socket: {@link #open} counts
   * those that were not.
   */
  @Override
  public void close() throws IOException {
    if (closed.compareAndSet(false, true)) {
      OPEN.decrementAndGet();
    }
    socket.close();
  }

  /** Clients made and not closed yet, in this JVM (for tests and tools). */
  static int open() {
    return OPEN.get();
  }

  /**
   * Gives the frame array back to {@link Buffers}: only once no thread can still read a
   * reply with this client (close() alone may run while another thread is in a read).
   */
  void recycle() {
    byte[] f = frame;
    frame = new byte[0];
    frameLen = 0;
    Buffers.give(f);
  }

  /**
   * The socket's input with one deadline per reply: each read waits at most until the
   * deadline, so a peer trickling a byte at a time cannot stretch a reply forever.
   */
  private static final class Deadline extends FilterInputStream {
    private final Socket socket;
    private long until; // System.nanoTime() deadline; 0: none (between replies)

    Deadline(Socket socket) throws IOException {
      super(socket.getInputStream());
      this.socket = socket;
    }

    void start(int millis) {
      until = System.nanoTime() + millis * 1_000_000L;
    }

    void stop() {
      until = 0;
    }

    private void arm() throws IOException {
      if (until == 0) {
        return;
      }
      long left = (until - System.nanoTime()) / 1_000_000L;
      if (left <= 0) {
        throw new SocketTimeoutException("reply deadline passed");
      }
      socket.setSoTimeout((int) Math.min(left, Integer.MAX_VALUE));
    }

    @Override
    public int read() throws IOException {
      arm();
      return super.read();
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      arm();
      return super.read(b, off, len);
    }
  }

  private static final class Payload {
    final ByteArrayOutputStream buf = new ByteArrayOutputStream(64);
    final DataOutputStream out = new DataOutputStream(buf);

    byte[] bytes() {
      return buf.toByteArray();
    }
  }
}
