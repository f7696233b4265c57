// Checks of one event's Arrow IPC stream that Arrow Java leaves to its caller: its
// MessageChannelReader allocates whatever a message's metadata and body lengths say, and
// VectorLoader and ArrowColumnVector trust a record batch's row counts, buffer offsets and
// lengths, compressed buffers' uncompressed lengths and offset buffers. stream() walks the
// raw stream before Arrow reads it (message framing, schema nesting, record batch nodes
// and buffers against the body); loaded() checks the vectors VectorLoader filled (buffer
// sizes for the value counts, offsets monotonic and inside their data). Every failure is
// an IOException naming the segment and the event's offset; nothing here allocates more
// than the stream's own size.
package io.segmentstore.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.arrow.flatbuf.Buffer;
import org.apache.arrow.flatbuf.Field;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.flatbuf.Schema;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseLargeVariableWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.BufferLayout;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.NullVector;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.BaseRepeatedValueVector;
import org.apache.arrow.vector.complex.LargeListVector;
import org.apache.arrow.vector.complex.UnionVector;
import org.apache.arrow.vector.types.pojo.ArrowType;

final class ArrowChecks {
  /** Deepest type nesting accepted (Spark's own schemas stay far below). */
  static final int MAX_DEPTH = 64;
  /** Most fields (all levels) a schema may have; also bounds a cyclic flatbuffer's walk. */
  static final int MAX_FIELDS = 100_000;
  /** Most bytes a record batch's compressed buffers may decompress to, in total. */
  static final long MAX_BATCH_BYTES = Envelope.MAX_VALUE_BYTES;

  private ArrowChecks() {}

  /**
   * The last schema message stream() accepted, and what it derived from it: the sink
   * writes the same schema bytes into every event, so a repeat is checked by comparing
   * bytes instead of parsing and converting the schema again. One per reader.
   */
  static final class SchemaMemo {
    private byte[] bytes;
    private int[] topNodes;
    private int nodes;
    private List<org.apache.arrow.vector.types.pojo.Field> flat;

    boolean matches(byte[] data, int from, int n) {
      return bytes != null && Arrays.equals(bytes, 0, bytes.length, data, from, from + n);
    }
  }

  /** Checks the stream {@code data[off, off + len)} of the event at {@code at}. */
  static void stream(byte[] data, int off, int len, String segment, long at)
      throws IOException {
    stream(data, off, len, segment, at, new SchemaMemo());
  }

  /** As above, reusing {@code memo}'s schema when this stream's schema bytes equal it. */
  static void stream(byte[] data, int off, int len, String segment, long at, SchemaMemo memo)
      throws IOException {
    String where = "segment '" + segment + "', event at offset " + at + ": ";
    ByteBuffer b = ByteBuffer.wrap(data, off, len).slice().order(ByteOrder.LITTLE_ENDIAN);
    int[] topNodes = null; // index of each top-level field's node; null before the schema
    int nodes = 0;
    List<org.apache.arrow.vector.types.pojo.Field> flat = new ArrayList<>(); // depth first
    int pos = 0;
    // Bounded: every pass consumes at least 4 bytes of the stream.
    while (len - pos >= 4) {
      int meta = b.getInt(pos);
      pos += 4;
      if (meta == -1) { // the continuation marker, then the length
        if (len - pos < 4) {
          throw fail(where, "the Arrow stream ends inside a message header");
        }
        meta = b.getInt(pos);
        pos += 4;
      }
      if (meta == 0) {
        return; // end of stream
      }
      if (meta < 0 || meta > len - pos) {
        throw fail(where, "an Arrow message declares " + meta + " metadata bytes at stream "
            + "offset " + (pos - 4) + ", past the stream's " + len + " bytes");
      }
      Message m;
      long body;
      byte type;
      try {
        m = Message.getRootAsMessage(slice(b, pos, meta));
        body = m.bodyLength();
        type = m.headerType();
      } catch (RuntimeException e) {
        throw fail(where, "an Arrow message's metadata does not parse: " + e);
      }
      int bodyAt = pos + meta;
      if (body < 0 || body > len - bodyAt) {
        throw fail(where, "an Arrow message declares a body of " + body + " bytes, past the "
            + "stream's " + len + " bytes");
      }
      try {
        if (type == MessageHeader.Schema && memo.matches(data, off + pos, meta)) {
          topNodes = memo.topNodes;
          nodes = memo.nodes;
          flat = memo.flat;
        } else if (type == MessageHeader.Schema) {
          memo.bytes = null;
          Schema s = (Schema) m.header(new Schema());
          if (s == null) {
            throw fail(where, "an Arrow schema message has no schema");
          }
          int[] count = {0};
          topNodes = new int[s.fieldsLength()];
          for (int i = 0; i < s.fieldsLength(); i++) {
            topNodes[i] = count[0];
            countFields(s.fields(i), 1, count, where);
          }
          nodes = count[0];
          flat = new ArrayList<>();
          for (org.apache.arrow.vector.types.pojo.Field f :
              org.apache.arrow.vector.types.pojo.Schema.convertSchema(s).getFields()) {
            flatten(f, flat);
          }
          memo.topNodes = topNodes;
          memo.nodes = nodes;
          memo.flat = flat;
          memo.bytes = Arrays.copyOfRange(data, off + pos, off + pos + meta);
        } else if (type == MessageHeader.RecordBatch) {
          RecordBatch rb = (RecordBatch) m.header(new RecordBatch());
          if (rb == null || topNodes == null) {
            throw fail(where, "an Arrow record batch without a schema before it");
          }
          batch(rb, nodes, topNodes, flat, slice(b, bodyAt, (int) body), where);
        }
      } catch (RuntimeException e) {
        throw fail(where, "an Arrow message's metadata does not parse: " + e);
      }
      pos = bodyAt + (int) body;
    }
    if (pos != len) {
      throw fail(where, "the Arrow stream ends inside a message header");
    }
  }

  private static ByteBuffer slice(ByteBuffer b, int from, int n) {
    ByteBuffer d = b.duplicate();
    d.position(from);
    d.limit(from + n);
    return d.slice().order(ByteOrder.LITTLE_ENDIAN);
  }

  private static void countFields(Field f, int depth, int[] count, String where)
      throws IOException {
    if (depth > MAX_DEPTH) {
      throw fail(where, "its Arrow schema nests types more than " + MAX_DEPTH + " deep");
    }
    if (++count[0] > MAX_FIELDS) {
      throw fail(where, "its Arrow schema has more than " + MAX_FIELDS + " fields");
    }
    for (int i = 0; i < f.childrenLength(); i++) {
      countFields(f.children(i), depth + 1, count, where);
    }
  }

  private static void flatten(
      org.apache.arrow.vector.types.pojo.Field f, List<org.apache.arrow.vector.types.pojo.Field> out) {
    out.add(f);
    for (org.apache.arrow.vector.types.pojo.Field c : f.getChildren()) {
      flatten(c, out);
    }
  }

  private static void batch(RecordBatch rb, int nodes, int[] topNodes,
      List<org.apache.arrow.vector.types.pojo.Field> flat, ByteBuffer body, String where)
      throws IOException {
    long rows = rb.length();
    if (rows < 0 || rows > Integer.MAX_VALUE) {
      throw fail(where, "an Arrow record batch of " + rows + " rows");
    }
    if (rb.nodesLength() != nodes) {
      throw fail(where, "an Arrow record batch with " + rb.nodesLength() + " field nodes for a "
          + "schema of " + nodes + " fields");
    }
    FieldNode node = new FieldNode();
    for (int i = 0; i < rb.nodesLength(); i++) {
      rb.nodes(node, i);
      if (node.length() < 0 || node.length() > Integer.MAX_VALUE || node.nullCount() < 0
          || node.nullCount() > node.length()) {
        throw fail(where, "an Arrow field node of " + node.length() + " values with "
            + node.nullCount() + " nulls");
      }
    }
    for (int i = 0; i < topNodes.length; i++) {
      long n = rb.nodes(node, topNodes[i]).length();
      if (n != rows) {
        throw fail(where, "an Arrow record batch of " + rows + " rows whose column " + i
            + " holds " + n + " rows");
      }
    }
    boolean compressed = rb.compression() != null;
    long decoded = 0;
    long size = body.limit();
    Buffer buf = new Buffer();
    for (int i = 0; i < rb.buffersLength(); i++) {
      rb.buffers(buf, i);
      long at = buf.offset();
      long n = buf.length();
      if (at < 0 || n < 0 || at > size || n > size - at) {
        throw fail(where, "an Arrow buffer of " + n + " bytes at body offset " + at
            + ", past the record batch's body of " + size + " bytes");
      }
      if (compressed && n > 0) {
        if (n < 8) {
          throw fail(where, "a compressed Arrow buffer of " + n + " bytes (no length prefix)");
        }
        long plain = body.getLong((int) at);
        if (plain != -1 && (plain < 0 || plain > MAX_BATCH_BYTES - decoded)) {
          throw fail(where, "a compressed Arrow buffer declaring " + plain + " uncompressed "
              + "bytes (a record batch may decompress to at most " + MAX_BATCH_BYTES + ")");
        }
        decoded += Math.max(plain, 0);
      }
    }
    sizes(rb, flat, body, where);
  }

  /**
   * Each buffer large enough for its field node's values: validity bits, offsets and
   * fixed-width data (variable-length data is checked against the offsets after loading).
   */
  private static void sizes(RecordBatch rb, List<org.apache.arrow.vector.types.pojo.Field> flat,
      ByteBuffer body, String where) throws IOException {
    boolean compressed = rb.compression() != null;
    FieldNode node = new FieldNode();
    Buffer buf = new Buffer();
    int j = 0;
    for (int k = 0; k < flat.size(); k++) {
      org.apache.arrow.vector.types.pojo.Field f = flat.get(k);
      List<BufferLayout> layout = TypeLayout.getTypeLayout(f.getType()).getBufferLayouts();
      if (f.getType() instanceof ArrowType.Union || j + layout.size() > rb.buffersLength()) {
        return; // unions and views are refused later, when the columns are matched
      }
      rb.nodes(node, k);
      long n = node.length();
      boolean variable = false;
      for (BufferLayout l : layout) {
        variable |= l.getType() == BufferLayout.BufferType.OFFSET;
      }
      for (BufferLayout l : layout) {
        rb.buffers(buf, j++);
        long size = buf.length();
        if (compressed && size >= 8) {
          long plain = body.getLong((int) buf.offset());
          size = plain == -1 ? size - 8 : plain;
        }
        long need;
        if (l.getType() == BufferLayout.BufferType.VALIDITY) {
          need = size == 0 && node.nullCount() == 0 ? 0 : (n + 7) / 8;
        } else if (l.getType() == BufferLayout.BufferType.OFFSET) {
          need = n == 0 ? 0 : (n + 1) * l.getTypeBitWidth() / 8;
        } else if (l.getType() == BufferLayout.BufferType.DATA && !variable) {
          need = (n * l.getTypeBitWidth() + 7) / 8;
        } else {
          need = 0;
        }
        if (size < need) {
          throw fail(where, "an Arrow record batch whose column '" + f.getName() + "' holds "
              + n + " values, more than its " + l.getType() + " buffer of " + size
              + " bytes holds");
        }
      }
    }
  }

  /** Checks the vectors VectorLoader loaded: sizes for their value counts, and offsets. */
  static void loaded(VectorSchemaRoot root, String where) throws IOException {
    for (FieldVector v : root.getFieldVectors()) {
      try {
        vector(v);
      } catch (RuntimeException e) {
        throw new IOException(
            "segmentstore-jvm: " + where + "its Arrow column '" + v.getName() + "' is "
                + "inconsistent with its record batch: " + e.getMessage(), e);
      }
    }
  }

  /**
   * Validity and fixed-width data buffers hold the value count; offsets start at 0 or more,
   * never decrease, and end inside their data. (Arrow's own ValueVectorUtility.validate
   * refuses the map vectors Spark writes, so this checks what ArrowColumnVector reads.)
   */
  private static void vector(FieldVector v) {
    int n = v.getValueCount();
    if (validityBytes(v) < (n + 7L) / 8) {
      throw new IllegalArgumentException("its validity buffer is too small for " + n + " values");
    }
    if (v instanceof BaseFixedWidthVector) {
      BaseFixedWidthVector w = (BaseFixedWidthVector) v;
      long need = w instanceof BitVector ? (n + 7L) / 8 : (long) n * w.getTypeWidth();
      if (w.getDataBuffer().capacity() < need) {
        throw new IllegalArgumentException("its data buffer is too small for " + n + " values");
      }
    } else if (v instanceof BaseVariableWidthVector) {
      check(v.getOffsetBuffer(), n, false, v.getDataBuffer().capacity());
    } else if (v instanceof BaseLargeVariableWidthVector) {
      check(v.getOffsetBuffer(), n, true, v.getDataBuffer().capacity());
    } else if (v instanceof LargeListVector) {
      LargeListVector l = (LargeListVector) v;
      check(v.getOffsetBuffer(), n, true, l.getDataVector().getValueCount());
    } else if (v instanceof BaseRepeatedValueVector) {
      BaseRepeatedValueVector l = (BaseRepeatedValueVector) v;
      check(v.getOffsetBuffer(), n, false, l.getDataVector().getValueCount());
    }
    for (FieldVector c : v.getChildrenFromFields()) {
      vector(c);
    }
  }

  private static long validityBytes(FieldVector v) {
    if (v instanceof NullVector || v instanceof UnionVector) {
      return Long.MAX_VALUE; // no validity buffer
    }
    try {
      return v.getValidityBuffer().capacity();
    } catch (UnsupportedOperationException e) {
      return Long.MAX_VALUE; // a vector kind without one (e.g. a non-nullable struct)
    }
  }

  private static void check(ArrowBuf offsets, int n, boolean wide, long limit) {
    if (n == 0) {
      return;
    }
    int width = wide ? 8 : 4;
    if (offsets.capacity() < (long) (n + 1) * width) {
      throw new IllegalArgumentException("its offset buffer is too small for " + n + " values");
    }
    long prev = wide ? offsets.getLong(0) : offsets.getInt(0);
    if (prev < 0) {
      throw new IllegalArgumentException("its first offset is " + prev);
    }
    for (int i = 1; i <= n; i++) {
      long o = wide ? offsets.getLong((long) i * 8) : offsets.getInt((long) i * 4);
      if (o < prev) {
        throw new IllegalArgumentException("its offset " + i + " (" + o + ") decreases");
      }
      prev = o;
    }
    if (prev > limit) {
      throw new IllegalArgumentException(
          "its last offset " + prev + " runs past its " + limit + " values or bytes of data");
    }
  }

  private static IOException fail(String where, String what) {
    return new IOException("segmentstore-jvm: " + where + what);
  }
}
