// Rows of one group -> the events the Python sink writes for them (writer.py, codec.py):
// one Arrow IPC stream per event (schema message carrying the Spark schema JSON under
// spark.schema in its metadata, one record batch, end of stream), buffers compressed with
// zstd or lz4 (arrow-compression's CommonsCompressionFactory, as pyarrow's IPC option),
// wrapped in the record envelope of segmentstore_client.records (version 1, codec none,
// headers content-type and spark.rows, CRC-32C last and little-endian). A group that
// encodes above maxEventBytes is split in halves, recursively, as encode_pieces splits it,
// so every attempt cuts the same pieces. Rows go into Arrow vectors through Spark's own
// ArrowWriter (its per-type setters); the vectors are reused from group to group.
package io.segmentstore.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32C;
import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.ipc.message.IpcOption;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;

final class EventEncoder implements AutoCloseable {
  static final String ROWS_HEADER = "spark.rows";

  /** One event: its record bytes and how many rows it holds. */
  static final class Piece {
    final byte[] record;
    final int rows;

    Piece(byte[] record, int rows) {
      this.record = record;
      this.rows = rows;
    }
  }

  private final VectorSchemaRoot root;
  private final ArrowWriter writer;
  private final CompressionCodec.Factory codecs;
  private final CompressionUtil.CodecType codec;
  private final int maxEventBytes;
  private final Out out = new Out();
  private int rows;

  EventEncoder(
      BufferAllocator allocator, StructType schema, String compression, int maxEventBytes) {
    // Utf8 and Binary as pyarrow writes them (Spark's default here is LargeUtf8 and
    // LargeBinary, which the Python reader would have to cast): timeZone, errorOnDuplicated
    // FieldNames, largeVarTypes, and the last flag off as in Spark's own Python path.
    Schema arrow = ArrowUtils.toArrowSchema(schema, "UTC", true, false, false);
    Schema withMeta =
        new Schema(arrow.getFields(), Map.of(ArrowEvents.SCHEMA_METADATA_KEY, schema.json()));
    this.root = VectorSchemaRoot.create(withMeta, allocator);
    this.writer = Decimal64Writer.create(root);
    this.maxEventBytes = maxEventBytes;
    if (compression.equals("none")) {
      codecs = NoCompressionCodec.Factory.INSTANCE;
      codec = CompressionUtil.CodecType.NO_COMPRESSION;
    } else {
      codecs = CommonsCompressionFactory.INSTANCE;
      codec = compression.equals("lz4")
          ? CompressionUtil.CodecType.LZ4_FRAME
          : CompressionUtil.CodecType.ZSTD;
    }
  }

  void add(InternalRow row) {
    writer.write(row);
    rows++;
  }

  int rows() {
    return rows;
  }

  /** The pending rows' events (one, or the halves of halves); the encoder is then empty. */
  List<Piece> pieces() throws IOException {
    writer.finish();
    List<Piece> done = new ArrayList<>(1);
    try {
      split(0, rows, done);
    } finally {
      writer.reset();
      rows = 0;
    }
    return done;
  }

  private void split(int start, int count, List<Piece> done) throws IOException {
    // Rows of several: the encoding stops as soon as it passes maxEventBytes (null), so a
    // group of a million rows never becomes one record of hundreds of MB (and its copy)
    // only to be halved; the pieces are the same.
    byte[] record = encode(start, count, count == 1 ? Integer.MAX_VALUE : maxEventBytes);
    if (record != null && record.length <= maxEventBytes) {
      done.add(new Piece(record, count));
      return;
    }
    if (count == 1) {
      if (record.length > WriteOptions.LIMIT_EVENT_BYTES) {
        throw new IOException(
            "segmentstore-jvm: one row encodes to " + record.length + " bytes, above the "
                + WriteOptions.LIMIT_EVENT_BYTES + "-byte event limit");
      }
      done.add(new Piece(record, 1));
      return;
    }
    int half = count / 2;
    split(start, half, done);
    split(start + half, count - half, done);
  }

  /** The record of rows [start, start + count), or null once it would pass {@code limit}. */
  private byte[] encode(int start, int count, int limit) throws IOException {
    out.reset();
    out.limit = limit - 4; // the CRC-32C follows
    head(count);
    int valueAt = out.size();
    try {
      if (start == 0 && count == rows) {
        stream(root);
      } else {
        try (VectorSchemaRoot part = root.slice(start, count)) {
          stream(part);
        }
      }
    } catch (Out.TooBig e) {
      return null;
    }
    if (out.size() == valueAt) {
      throw new IOException("segmentstore-jvm: the Arrow writer produced no bytes");
    }
    return out.sealed();
  }

  private void stream(VectorSchemaRoot r) throws IOException {
    // close() would close the channel and the stream under it: a no-op for Out.
    ArrowStreamWriter w =
        new ArrowStreamWriter(r, null, Channels.newChannel(out), IpcOption.DEFAULT, codecs, codec);
    w.start();
    w.writeBatch();
    w.end();
  }

  /** The envelope up to its value: version, attributes, timestamp, no key, headers. */
  private void head(int count) {
    byte[] type = Envelope.ARROW.getBytes(StandardCharsets.UTF_8);
    byte[] n = Integer.toString(count).getBytes(StandardCharsets.UTF_8);
    ByteBuffer b = ByteBuffer.allocate(64 + type.length + n.length);
    b.put((byte) Envelope.FORMAT_VERSION).put((byte) 0); // codec none: Arrow compresses
    b.putLong(System.currentTimeMillis() * 1_000_000L);
    b.putInt(-1); // no key
    b.putShort((short) 2);
    header(b, Envelope.CONTENT_TYPE, type);
    header(b, ROWS_HEADER, n);
    out.write(b.array(), 0, b.position());
  }

  private static void header(ByteBuffer b, String name, byte[] value) {
    byte[] k = name.getBytes(StandardCharsets.UTF_8);
    b.putShort((short) k.length).put(k).putInt(value.length).put(value);
  }

  @Override
  public void close() {
    root.close();
  }

  /** A byte stream whose bytes become one record: a copy with the CRC-32C appended. */
  private static final class Out extends ByteArrayOutputStream {
    /** Thrown by a write that would make the stream longer than {@link #limit}. */
    static final class TooBig extends RuntimeException {
      private static final long serialVersionUID = 1L;

      TooBig() {
        super("over the event size", null, false, false);
      }
    }

    private static final TooBig TOO_BIG = new TooBig();
    int limit = Integer.MAX_VALUE;

    Out() {
      super(1 << 20);
    }

    @Override
    public void write(byte[] b, int off, int len) {
      if (len > limit - count) {
        throw TOO_BIG;
      }
      super.write(b, off, len);
    }

    @Override
    public void write(int b) {
      if (count >= limit) {
        throw TOO_BIG;
      }
      super.write(b);
    }

    byte[] sealed() {
      CRC32C crc = new CRC32C();
      crc.update(buf, 0, count);
      byte[] record = java.util.Arrays.copyOf(buf, count + 4);
      ByteBuffer.wrap(record, count, 4).order(ByteOrder.LITTLE_ENDIAN).putInt((int) crc.getValue());
      return record;
    }
  }
}
