// One event's Arrow IPC stream (the Spark sink's encoding) as Spark ColumnarBatches of the
// requested columns only. The record batch's field nodes and buffers are pruned to those
// columns before VectorLoader sees them, so the other columns' buffers are never
// decompressed (zstd or lz4 buffer compression through arrow-compression). A requested
// column is matched by name, case-insensitively; it must hold the requested Spark type
// (the Spark type of its Arrow type, which is what ArrowColumnVector reads), since
// Spark reads ArrowColumnVectors as they are: widening reads are the Python source's job.
// A column the event lacks is null, as in the Python source. Each batch stays valid
// until the next call to next() or close(). The stream is read in place from the event's
// bytes (ArrowChecks.stream has checked its framing first): only the requested columns'
// buffers are copied into Arrow memory, and an event whose schema message is byte for byte
// the previous event's reuses its column mapping instead of parsing the schema again.
package io.segmentstore.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.flatbuf.BodyCompression;
import org.apache.arrow.flatbuf.Buffer;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.compression.NoCompressionCodec;
import org.apache.arrow.vector.ipc.message.ArrowBodyCompression;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataType$;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

final class ArrowEvents implements AutoCloseable {
  static final String SCHEMA_METADATA_KEY = "spark.schema";

  private final BufferAllocator allocator;
  private final StructType want;
  private final Map<String, StructType> sparkSchemas = new HashMap<>();
  // The open event's IPC stream: data[streamAt + pos, streamAt + streamLen) is unread.
  private byte[] data = new byte[0];
  private int streamAt;
  private int streamLen;
  private int pos;
  private byte[] schemaBytes; // the schema message of the last mapped schema
  private final ArrowChecks.SchemaMemo checked = new ArrowChecks.SchemaMemo();
  private String where = "";
  // Per event: which Arrow fields to keep, and where each requested column comes from.
  private int[] keepFields = new int[0];
  private int[] nodeStart = new int[0];
  private int[] nodeCount = new int[0];
  private int[] bufStart = new int[0];
  private int[] bufCount = new int[0];
  private int[] source = new int[0]; // requested column -> index in keepFields, or -1
  private Schema pruned;
  private StructType stored;
  private VectorSchemaRoot root;
  private ColumnarBatch batch;

  ArrowEvents(BufferAllocator allocator, StructType want) {
    this.allocator = allocator;
    this.want = want;
  }

  /** Starts on one event's IPC stream (its schema message is read here). */
  void open(Envelope value, String segment, long at) throws IOException {
    closeStream();
    where = "segment '" + segment + "', event at offset " + at + ": ";
    ArrowChecks.stream(value.data, value.offset, value.length, segment, at, checked);
    data = value.data;
    streamAt = value.offset;
    streamLen = value.length;
    pos = 0;
    if (!nextMessage() || header.headerType() != MessageHeader.Schema) {
      throw fail("the Arrow stream does not start with a schema");
    }
    // The sink writes one schema per event, the same bytes for every event of a write:
    // mapping it once per distinct schema saves parsing it (and its JSON) per event.
    if (schemaBytes == null
        || !Arrays.equals(schemaBytes, 0, schemaBytes.length, data, metaAt, metaAt + metaLen)) {
      Schema schema;
      try {
        schema = MessageSerializer.deserializeSchema(header);
      } catch (RuntimeException e) {
        throw fail("its Arrow schema does not parse: " + e);
      }
      schemaBytes = null;
      mapColumns(schema);
      schemaBytes = Arrays.copyOfRange(data, metaAt, metaAt + metaLen);
    }
    pos = bodyAt + (int) bodyLength;
  }

  // The message nextMessage() found: its flatbuffer and where its metadata and body are.
  private Message header;
  private int metaAt;
  private int metaLen;
  private int bodyAt;
  private long bodyLength;

  /** Reads the framing of the message at pos (already checked by ArrowChecks.stream). */
  private boolean nextMessage() throws IOException {
    ByteBuffer b = ByteBuffer.wrap(data, streamAt, streamLen).slice().order(ByteOrder.LITTLE_ENDIAN);
    if (streamLen - pos < 4) {
      return false;
    }
    int p = pos;
    int meta = b.getInt(p);
    p += 4;
    if (meta == -1) {
      if (streamLen - p < 4) {
        return false;
      }
      meta = b.getInt(p);
      p += 4;
    }
    if (meta == 0) {
      return false;
    }
    if (meta < 0 || meta > streamLen - p) {
      throw fail("an Arrow message's metadata runs past its stream");
    }
    try {
      ByteBuffer mb = ByteBuffer.wrap(data, streamAt + p, meta).slice().order(ByteOrder.LITTLE_ENDIAN);
      header = Message.getRootAsMessage(mb);
      bodyLength = header.bodyLength();
    } catch (RuntimeException e) {
      throw fail("its Arrow stream does not parse: " + e);
    }
    metaAt = streamAt + p;
    metaLen = meta;
    bodyAt = p + meta;
    if (bodyLength < 0 || bodyLength > streamLen - bodyAt) {
      throw fail("an Arrow message's body runs past its stream");
    }
    return true;
  }

  private void mapColumns(Schema schema) throws IOException {
    List<Field> fields = schema.getFields();
    stored = storedSchema(schema);
    Map<String, Integer> byName = new HashMap<>();
    for (int i = 0; i < fields.size(); i++) {
      byName.putIfAbsent(fields.get(i).getName().toLowerCase(Locale.ROOT), i);
    }
    int n = fields.size();
    int[] ns = new int[n];
    int[] nc = new int[n];
    int[] bs = new int[n];
    int[] bc = new int[n];
    int nodes = 0;
    int bufs = 0;
    for (int i = 0; i < n; i++) {
      ns[i] = nodes;
      bs[i] = bufs;
      nc[i] = countNodes(fields.get(i));
      bc[i] = countBuffers(fields.get(i));
      nodes += nc[i];
      bufs += bc[i];
    }
    StructField[] wanted = want.fields();
    List<Integer> keep = new ArrayList<>();
    int[] src = new int[wanted.length];
    for (int j = 0; j < wanted.length; j++) {
      Integer i = byName.get(wanted[j].name().toLowerCase(Locale.ROOT));
      if (i == null) {
        src[j] = -1;
        continue;
      }
      // The Arrow type decides: it is what ArrowColumnVector reads (the spark.schema
      // metadata only names the schema Spark infers).
      DataType has = ArrowUtils.fromArrowField(fields.get(i));
      if (!DataType$.MODULE$.equalsIgnoreNullability(has, wanted[j].dataType())) {
        throw fail(
            "column '" + wanted[j].name() + "' holds " + has.simpleString()
                + ", and the JVM reader reads columns only as they are stored (asked for "
                + wanted[j].dataType().simpleString() + "); read it as "
                + has.simpleString() + " and cast in Spark, or use format('segmentstore')");
      }
      src[j] = keep.size();
      keep.add(i);
    }
    keepFields = keep.stream().mapToInt(Integer::intValue).toArray();
    nodeStart = ns;
    nodeCount = nc;
    bufStart = bs;
    bufCount = bc;
    source = src;
    List<Field> kept = new ArrayList<>();
    for (int i : keepFields) {
      kept.add(fields.get(i));
    }
    pruned = new Schema(kept);
  }

  private StructType storedSchema(Schema schema) throws IOException {
    String json = schema.getCustomMetadata().get(SCHEMA_METADATA_KEY);
    StructType found = json == null ? null : sparkSchemas.get(json);
    if (found == null && json != null) {
      try {
        found = (StructType) DataType.fromJson(json);
      } catch (RuntimeException e) {
        throw fail("its spark.schema metadata does not parse: " + e.getMessage());
      }
      sparkSchemas.put(json, found);
    }
    if (found == null || found.fields().length != schema.getFields().size()) {
      found = ArrowUtils.fromArrowSchema(schema);
    }
    return found;
  }

  private static int countNodes(Field f) {
    int n = 1;
    for (Field c : f.getChildren()) {
      n += countNodes(c);
    }
    return n;
  }

  private static int countBuffers(Field f) {
    int n = TypeLayout.getTypeBufferCount(f.getType());
    for (Field c : f.getChildren()) {
      n += countBuffers(c);
    }
    return n;
  }

  /** Loads the event's next record batch; false at the end of its stream. */
  boolean next() throws IOException {
    if (!nextMessage()) {
      return false;
    }
    byte type = header.headerType();
    if (type != MessageHeader.RecordBatch) {
      throw fail(
          "an Arrow " + MessageHeader.name(type) + " message (dictionary-encoded columns "
              + "are read by format('segmentstore'))");
    }
    int body = streamAt + bodyAt;
    pos = bodyAt + (int) bodyLength;
    RecordBatch rb;
    try {
      rb = (RecordBatch) header.header(new RecordBatch());
    } catch (RuntimeException e) {
      throw fail("its Arrow stream does not parse: " + e);
    }
    int lastField = nodeStart.length - 1;
    int needNodes = lastField < 0 ? 0 : nodeStart[lastField] + nodeCount[lastField];
    int needBufs = lastField < 0 ? 0 : bufStart[lastField] + bufCount[lastField];
    if (rb == null || rb.nodesLength() != needNodes || rb.buffersLength() != needBufs) {
      throw fail("an Arrow record batch whose layout does not match its schema");
    }
    // Only the kept columns' buffers are copied out of the event, into one Arrow buffer
    // (8-byte aligned pieces); the other columns' bytes are never touched.
    List<ArrowFieldNode> keptNodes = new ArrayList<>();
    Buffer fb = new Buffer();
    long total = 0;
    for (int i : keepFields) {
      for (int k = bufStart[i]; k < bufStart[i] + bufCount[i]; k++) {
        total += (rb.buffers(fb, k).length() + 7) & ~7L;
      }
    }
    List<ArrowBuf> keptBufs = new ArrayList<>();
    FieldNode fn = new FieldNode();
    try (ArrowBuf kept = allocator.buffer(total)) {
      long at = 0;
      for (int i : keepFields) {
        for (int k = nodeStart[i]; k < nodeStart[i] + nodeCount[i]; k++) {
          rb.nodes(fn, k);
          keptNodes.add(new ArrowFieldNode(fn.length(), fn.nullCount()));
        }
        for (int k = bufStart[i]; k < bufStart[i] + bufCount[i]; k++) {
          rb.buffers(fb, k);
          int n = (int) fb.length(); // inside the body: ArrowChecks.stream checked it
          kept.setBytes(at, data, body + (int) fb.offset(), n);
          keptBufs.add(kept.slice(at, n));
          at += (n + 7) & ~7L;
        }
      }
      BodyCompression c = rb.compression();
      ArrowBodyCompression compression =
          c == null
              ? NoCompressionCodec.DEFAULT_BODY_COMPRESSION
              : new ArrowBodyCompression(c.codec(), c.method());
      // A fresh root per batch: VectorLoader cannot reload nested vectors (a struct's
      // children) into a root it loaded before. Creating one costs microseconds.
      closeRoot();
      root = VectorSchemaRoot.create(pruned, allocator);
      try (ArrowRecordBatch prunedBatch =
          new ArrowRecordBatch((int) rb.length(), keptNodes, keptBufs, compression)) {
        new VectorLoader(root, CommonsCompressionFactory.INSTANCE).load(prunedBatch);
      } catch (RuntimeException e) {
        throw fail("its Arrow record batch does not load: " + e);
      }
    }
    ArrowChecks.loaded(root, where);
    buildBatch(root.getRowCount());
    return true;
  }

  private void buildBatch(int rows) {
    StructField[] wanted = want.fields();
    ColumnVector[] cols = new ColumnVector[wanted.length];
    List<FieldVector> vectors = root.getFieldVectors();
    for (int j = 0; j < wanted.length; j++) {
      DataType t = wanted[j].dataType();
      if (source[j] < 0) {
        ConstantColumnVector nulls = new ConstantColumnVector(rows, t);
        nulls.setNull();
        cols[j] = nulls;
        continue;
      }
      FieldVector v = vectors.get(source[j]);
      if (v instanceof DecimalVector
          && ((DecimalType) t).precision() <= Decimal64Vector.MAX_PRECISION) {
        cols[j] = new Decimal64Vector(t, (DecimalVector) v);
      } else {
        cols[j] = new ArrowColumnVector(v);
      }
    }
    batch = new ColumnarBatch(cols, rows);
  }

  /** The Spark schema of the open event's rows. */
  StructType storedSchema() {
    return stored;
  }

  ColumnarBatch batch() {
    return batch;
  }

  /**
   * Hands the caller the root of the batch next() loaded (the caller closes it, which frees
   * the batch's memory); next() then makes a new one instead of closing it.
   */
  VectorSchemaRoot detachRoot() {
    VectorSchemaRoot r = root;
    root = null;
    return r;
  }

  private IOException fail(String what) {
    return new IOException("segmentstore-jvm: " + where + what);
  }

  private void closeStream() {
    data = new byte[0];
    streamAt = 0;
    streamLen = 0;
    pos = 0;
  }

  private void closeRoot() {
    if (root != null) {
      root.close();
      root = null;
    }
  }

  @Override
  public void close() throws IOException {
    closeStream();
    closeRoot();
  }
}
