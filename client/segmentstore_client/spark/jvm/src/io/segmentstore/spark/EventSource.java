// The events of one input partition, read with ReadSegment over one connection: every
// event whose 8-byte header (type 0, length) starts in [start, end), the last one read to
// its end even past {@code end}. One read of up to 2 MiB (the server's cap) is kept in
// flight ahead of the decoder, so the server and the network work while a batch decodes.
// An event header that is not an event, or a segment ending inside an event, is an
// IOException naming the segment and the offset. The event's bytes stay valid until the
// next call to next().
package io.segmentstore.spark;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;

final class EventSource implements Closeable {
  static final int READ_BYTES = 2 * 1024 * 1024;
  static final int MAX_EVENT_BYTES = 64 * 1024 * 1024;

  private final WireClient client;
  private final String segment;
  private final long end;
  private final int readBytes;
  private byte[] buf;
  private int head; // buf[head] is the byte at segment offset pos
  private int tail;
  private long pos;
  private long pendingId = -1;
  private long pendingOffset;
  private boolean ended;

  /** Offset of the current event, and its bytes: buf()[dataOffset, dataOffset + length). */
  long offset;

  int dataOffset;
  int length;

  /** Reads of {@code readBytes} (at most 2 MiB), more where one event needs more. */
  EventSource(WireClient client, String segment, long start, long end, int readBytes) {
    this.client = client;
    this.segment = segment;
    this.pos = start;
    this.end = end;
    this.readBytes = Math.min(readBytes, READ_BYTES);
    this.buf = Buffers.take(this.readBytes * 2);
  }

  byte[] buf() {
    return buf;
  }

  /** Moves to the next event of the range; false after the last one. */
  boolean next() throws IOException {
    if (pos >= end) {
      return false;
    }
    if (!ensure(8)) {
      if (tail == head) {
        throw ReplyErrors.shrank(segment, pos, end); // segments never shrink
      }
      throw Envelope.corrupt(segment, pos, "the segment ends inside an event header");
    }
    ByteBuffer b = ByteBuffer.wrap(buf);
    int type = b.getInt(head);
    int len = b.getInt(head + 4);
    if (type != 0 || len < 0 || len > MAX_EVENT_BYTES) {
      throw new IOException(
          "segmentstore-jvm: segment '" + segment + "' holds no event record at offset " + pos
              + " (type " + type + ", length " + len + ")");
    }
    if (!ensure(8 + len)) {
      throw Envelope.corrupt(segment, pos, "the segment ends inside the event");
    }
    offset = pos;
    dataOffset = head + 8;
    length = len;
    head += 8 + len;
    pos += 8L + len;
    return true;
  }

  /** At least {@code n} bytes buffered from pos; false if the segment has fewer. */
  private boolean ensure(int n) throws IOException {
    while (tail - head < n) {
      if (ended) {
        return false;
      }
      if (pendingId < 0) {
        request(Math.max(readBytes, n - (tail - head)));
      }
      WireClient.Chunk c = client.readReply(segment, pendingId, pendingOffset);
      pendingId = -1;
      if (c.length == 0) {
        ended = true; // at the tail or the end of a sealed segment
        return false;
      }
      append(c.frame, c.from, c.length);
      if (pos + (tail - head) < end) {
        request(readBytes); // prefetch the next piece of the range
      }
    }
    return true;
  }

  private void request(int length) throws IOException {
    pendingOffset = pos + (tail - head);
    pendingId = client.requestRead(segment, pendingOffset, Math.min(length, READ_BYTES));
  }

  private void append(byte[] data, int from, int n) {
    int have = tail - head;
    if (tail + n > buf.length) {
      byte[] to = have + n > buf.length ? Buffers.take(2 * (have + n)) : buf;
      System.arraycopy(buf, head, to, 0, have);
      if (to != buf) {
        Buffers.give(buf);
      }
      buf = to;
      head = 0;
      tail = have;
    }
    System.arraycopy(data, from, buf, tail, n);
    tail += n;
  }

  @Override
  public void close() throws IOException {
    client.close();
  }

  /**
   * Gives this source's arrays (its buffer, its client's frame) back to {@link Buffers}:
   * only after close(), once no thread can still be inside next(); the event bytes last
   * returned are invalid afterwards.
   */
  void recycle() {
    byte[] b = buf;
    buf = new byte[0];
    head = 0;
    tail = 0;
    client.recycle();
    Buffers.give(b);
  }
}
