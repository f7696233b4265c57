// The record envelope of segmentstore_client.records (format version 1), checked and
// unwrapped: CRC-32C over everything but the last 4 bytes (stored little-endian), then
// version, attributes (bits 0-2 codec), timestamp, key, headers, value. A bad CRC or a
// field running past the record (lengths are checked without overflow) or a value that
// does not decompress, or decompresses to more than MAX_VALUE_BYTES, is an IOException
// naming the segment and the offset; bytes that are not a record at all (too short, wrong first byte) are refused as raw
// events, which the Python source reads with output=raw.
package io.segmentstore.spark;

import com.github.luben.zstd.ZstdInputStream;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;
import org.apache.commons.compress.compressors.lz4.FramedLZ4CompressorInputStream;

final class Envelope {
  static final int FORMAT_VERSION = 1;
  static final int OVERHEAD = 20;
  /** The most bytes one record's value may decompress to: 32x the largest event the sink
   * writes (8 MiB); more is a decompression bomb, refused before it fills the heap. */
  static final int MAX_VALUE_BYTES = 256 * 1024 * 1024;
  static final String CONTENT_TYPE = "content-type";
  static final String ARROW = "application/vnd.apache.arrow.stream";
  static final String MSGPACK = "application/x-spark-rows+msgpack";
  private static final String[] CODECS = {"none", "gzip", "lz4", "zstd"};

  /** The value's bytes: {@code data[offset, offset + length)}. */
  final byte[] data;

  final int offset;
  final int length;
  final String contentType;

  private Envelope(byte[] data, int offset, int length, String contentType) {
    this.data = data;
    this.offset = offset;
    this.length = length;
    this.contentType = contentType;
  }

  /** Checks and unwraps the record in {@code buf[off, off + n)}, the event at {@code at}. */
  static Envelope open(String segment, long at, byte[] buf, int off, int n) throws IOException {
    if (n < OVERHEAD || buf[off] != FORMAT_VERSION) {
      throw new IOException(
          "segmentstore-jvm: segment '" + segment + "' holds raw events (the event at offset "
              + at + " is not a record); the JVM reader reads rows written by the Spark "
              + "integration only: read it with format('segmentstore') and "
              + "option('output', 'raw')");
    }
    CRC32C crc = new CRC32C();
    crc.update(buf, off, n - 4);
    ByteBuffer b = ByteBuffer.wrap(buf, off, n).slice();
    int stored = b.order(ByteOrder.LITTLE_ENDIAN).getInt(n - 4);
    b.order(ByteOrder.BIG_ENDIAN);
    if ((int) crc.getValue() != stored) {
      throw corrupt(segment, at, "record CRC-32C mismatch: the record is corrupt");
    }
    int attrs = b.get(1) & 0xff;
    int end = n - 4;
    int pos = 10;
    int klen = b.getInt(pos);
    pos += 4;
    if (klen != -1 && (klen < 0 || klen > end - pos)) {
      throw corrupt(segment, at, "record key length " + klen + " is out of range");
    }
    pos += Math.max(klen, 0);
    String contentType = "";
    if (pos + 2 > end) {
      throw corrupt(segment, at, "record fields run past the record");
    }
    int count = b.getShort(pos) & 0xffff;
    pos += 2;
    for (int i = 0; i < count; i++) {
      if (pos + 2 > end) {
        throw corrupt(segment, at, "record header runs past the record");
      }
      int nlen = b.getShort(pos) & 0xffff;
      pos += 2;
      if (pos + nlen + 4 > end) {
        throw corrupt(segment, at, "record header runs past the record");
      }
      String name = new String(buf, off + pos, nlen, StandardCharsets.UTF_8);
      pos += nlen;
      int vlen = b.getInt(pos);
      pos += 4;
      if (vlen < 0 || vlen > end - pos) { // not pos + vlen: that overflows
        throw corrupt(segment, at, "record header runs past the record");
      }
      if (name.equals(CONTENT_TYPE)) {
        contentType = new String(buf, off + pos, vlen, StandardCharsets.UTF_8);
      }
      pos += vlen;
    }
    int codec = attrs & 7;
    if (codec >= CODECS.length) {
      throw corrupt(segment, at, "unknown record codec id " + codec);
    }
    if (codec == 0) {
      return new Envelope(buf, off + pos, end - pos, contentType);
    }
    byte[] plain;
    boolean more;
    try (InputStream raw = new ByteArrayInputStream(buf, off + pos, end - pos);
        InputStream z = decompressor(codec, raw)) {
      plain = z.readNBytes(MAX_VALUE_BYTES); // bounded: never readAllBytes on peer data
      more = z.read() >= 0;
    } catch (IOException | RuntimeException e) {
      throw corrupt(
          segment, at, "record value does not decompress with " + CODECS[codec] + ": " + e);
    }
    if (more) {
      throw corrupt(
          segment, at, "record value decompresses with " + CODECS[codec] + " to more than "
              + MAX_VALUE_BYTES + " bytes (the reader's limit for one event's value)");
    }
    return new Envelope(plain, 0, plain.length, contentType);
  }

  private static InputStream decompressor(int codec, InputStream raw) throws IOException {
    switch (codec) {
      case 1:
        return new GZIPInputStream(raw);
      case 2:
        return new FramedLZ4CompressorInputStream(raw, true);
      default:
        return new ZstdInputStream(raw);
    }
  }

  static IOException corrupt(String segment, long at, String what) {
    return new IOException(
        "segmentstore-jvm: segment '" + segment + "', event at offset " + at + ": " + what);
  }
}
