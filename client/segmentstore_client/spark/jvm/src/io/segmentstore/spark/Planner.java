// Input partitions of a read, by the Python source's rule (reader.py segment_spans and
// cut_spans, raw.py plan_ranges), so both readers plan the same ranges: each segment's
// readable range [max(start offset, overwrite base, startOffset), min(length, endOffset)),
// cut at event boundaries into pieces of at most partitionBytes and, when the data allows,
// into at least minPartitions pieces of at least 1 MiB. Boundaries are found by hopping
// from event header to event header with 8 KiB reads, at most 4,096 of them per segment.
package io.segmentstore.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;

final class Planner {
  static final long MIN_PARTITION_BYTES = 1L << 20;
  static final int HOP_READ_BYTES = 8 * 1024;
  static final int MAX_HOPS = 4096;
  static final UUID NAMESPACE = UUID.fromString("0b6f64a4-7d0e-5c55-9a8e-2f3f1e5b7c11");
  /** options.py BASE_ATTRIBUTE: where an overwrite's new contents start. */
  static final UUID BASE_ATTRIBUTE = uuid5(NAMESPACE, "overwrite-base");

  private Planner() {}

  /** One read task: the events of {@code segment} whose records start in [start, end). */
  static final class Range implements org.apache.spark.sql.connector.read.InputPartition {
    private static final long serialVersionUID = 1L;
    final String segment;
    final long start;
    final long end;

    Range(String segment, long start, long end) {
      this.segment = segment;
      this.start = start;
      this.end = end;
    }

    @Override
    public String toString() {
      return segment + "[" + start + ", " + end + ")";
    }
  }

  /** Each segment's readable span, as {@code Range}s (uncut). */
  static List<Range> spans(ReadOptions o, WireClient c) throws IOException {
    List<Range> spans = new ArrayList<>();
    for (String seg : o.segments) {
      WireClient.Info info = c.info(seg);
      long base = c.attribute(seg, BASE_ATTRIBUTE);
      if (base != WireClient.NULL_ATTRIBUTE && (base < 0 || base > info.length)) {
        // Set atomically with an overwrite's merge, so never past the end: damage, not empty.
        throw new IOException(
            "segmentstore-jvm: segment '" + seg + "': its overwrite base " + base
                + " lies outside [0, " + info.length + "] (a damaged attribute; nothing was read)");
      }
      long start = Math.max(info.startOffset, base == WireClient.NULL_ATTRIBUTE ? 0 : base);
      start = Math.max(start, Math.max(o.startOffset, 0));
      long end = o.endOffset < 0 ? info.length : Math.min(info.length, o.endOffset);
      if (end > start) {
        spans.add(new Range(seg, start, end));
      }
    }
    return spans;
  }

  static List<Range> plan(ReadOptions o) throws IOException {
    long t = Timing.now();
    try (WireClient c = new WireClient(o)) {
      Timing.log("plan-connect", t, "");
      t = Timing.now();
      List<Range> spans = spans(o, c);
      Timing.log("plan-info", t, "");
      t = Timing.now();
      long total = 0;
      for (Range r : spans) {
        total += r.end - r.start;
      }
      long perPart = (total + o.minPartitions - 1) / o.minPartitions;
      long piece = Math.min(o.partitionBytes, Math.max(MIN_PARTITION_BYTES, perPart));
      List<Range> parts = new ArrayList<>();
      for (Range r : spans) {
        if (r.end - r.start <= piece) {
          parts.add(r);
          continue;
        }
        List<Long> cuts = cuts(c, r.segment, r.start, r.end, piece);
        for (int i = 0; i + 1 < cuts.size(); i++) {
          if (cuts.get(i + 1) > cuts.get(i)) {
            parts.add(new Range(r.segment, cuts.get(i), cuts.get(i + 1)));
          }
        }
      }
      Timing.log("plan-cuts", t, "");
      return parts;
    }
  }

  /** raw.py plan_ranges: event boundaries about {@code target} bytes apart. */
  static List<Long> cuts(WireClient c, String seg, long start, long end, long target)
      throws IOException {
    List<Long> cuts = new ArrayList<>();
    cuts.add(start);
    if (end - start <= target + target / 2) {
      cuts.add(end);
      return cuts;
    }
    long nextCut = start + target;
    long pos = start;
    ByteBuffer buf = ByteBuffer.allocate(0);
    long bufAt = start;
    int requests = 0;
    long t = Timing.now();
    // pos grows by at least 8 per pass and reads are budgeted: the walk is bounded.
    while (pos < end && nextCut < end - target / 2) {
      if (pos + 8 > bufAt + buf.limit()) {
        if (requests >= MAX_HOPS) {
          break;
        }
        buf = ByteBuffer.wrap(hop(c, seg, pos));
        bufAt = pos;
        requests++;
        if (buf.limit() < 8) {
          break; // no complete header there: stop splitting
        }
      }
      int type = buf.getInt((int) (pos - bufAt));
      int length = buf.getInt((int) (pos - bufAt) + 4);
      if (type != 0 || length < 0) {
        throw new IOException(
            "segmentstore-jvm: segment '" + seg + "' holds no event record at offset " + pos
                + " (type " + type + ", length " + length + ")");
      }
      if (pos >= nextCut) {
        cuts.add(pos);
        nextCut = pos + target;
      }
      pos += 8L + length;
    }
    Timing.log("plan-hops", t, requests + " reads");
    cuts.add(end);
    return cuts;
  }

  private static byte[] hop(WireClient c, String seg, long pos) throws IOException {
    long id = c.requestRead(seg, pos, HOP_READ_BYTES);
    return c.readReply(seg, id, pos).bytes();
  }

  static UUID uuid5(UUID namespace, String name) {
    try {
      MessageDigest sha1 = MessageDigest.getInstance("SHA-1");
      ByteBuffer ns = ByteBuffer.allocate(16);
      ns.putLong(namespace.getMostSignificantBits()).putLong(namespace.getLeastSignificantBits());
      sha1.update(ns.array());
      byte[] h = sha1.digest(name.getBytes(StandardCharsets.UTF_8));
      h[6] = (byte) ((h[6] & 0x0f) | 0x50);
      h[8] = (byte) ((h[8] & 0x3f) | 0x80);
      ByteBuffer b = ByteBuffer.wrap(h, 0, 16);
      return new UUID(b.getLong(), b.getLong());
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
