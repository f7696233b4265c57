// One event's Arrow IPC stream (the Spark sink's encoding) as Spark ColumnarBatches of the
// requested columns only. The record batch's field nodes and buffers are pruned to those
// columns before VectorLoader sees them, so the other columns' buffers are never
// decompressed (zstd or lz4 buffer compression through arrow-compression). A requested
// column is matched by name, case-insensitively; it must hold the requested Spark type
// (the Spark type of its Arrow type, which is what ArrowColumnVector reads), since
// Spark reads ArrowColumnVectors as they are: widening reads are the Python source's job.
// A column the event lacks is null, as in the Python source. Each batch stays valid
// until the next call to next() or close().
package io.segmentstore.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageChannelReader;
import org.apache.arrow.vector.ipc.message.MessageResult;
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
  private MessageChannelReader reader;
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
    closeReader();
    where = "segment '" + segment + "', event at offset " + at + ": ";
    ArrowChecks.stream(value.data, value.offset, value.length, segment, at);
    ReadChannel ch =
        new ReadChannel(
            Channels.newChannel(new ByteArrayInputStream(value.data, value.offset, value.length)));
    reader = new MessageChannelReader(ch, allocator);
    MessageResult first = next(reader);
    if (first == null || first.getMessage().headerType() != MessageHeader.Schema) {
      throw fail("the Arrow stream does not start with a schema");
    }
    Schema schema = MessageSerializer.deserializeSchema(first.getMessage());
    mapColumns(schema);
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
    MessageResult m = next(reader);
    if (m == null) {
      return false;
    }
    byte type = m.getMessage().headerType();
    if (type != MessageHeader.RecordBatch) {
      if (m.getBodyBuffer() != null) {
        m.getBodyBuffer().close();
      }
      throw fail(
          "an Arrow " + MessageHeader.name(type) + " message (dictionary-encoded columns "
              + "are read by format('segmentstore'))");
    }
    // deserializeRecordBatch takes over the body: its batch holds the only references.
    try (ArrowRecordBatch full =
        MessageSerializer.deserializeRecordBatch(m.getMessage(), m.getBodyBuffer())) {
      List<ArrowFieldNode> nodes = full.getNodes();
      List<ArrowBuf> bufs = full.getBuffers();
      List<ArrowFieldNode> keptNodes = new ArrayList<>();
      List<ArrowBuf> keptBufs = new ArrayList<>();
      int lastField = nodeStart.length - 1;
      int needNodes = lastField < 0 ? 0 : nodeStart[lastField] + nodeCount[lastField];
      int needBufs = lastField < 0 ? 0 : bufStart[lastField] + bufCount[lastField];
      if (nodes.size() != needNodes || bufs.size() != needBufs) {
        throw fail("an Arrow record batch whose layout does not match its schema");
      }
      for (int i : keepFields) {
        keptNodes.addAll(nodes.subList(nodeStart[i], nodeStart[i] + nodeCount[i]));
        keptBufs.addAll(bufs.subList(bufStart[i], bufStart[i] + bufCount[i]));
      }
      // A fresh root per batch: VectorLoader cannot reload nested vectors (a struct's
      // children) into a root it loaded before. Creating one costs microseconds.
      closeRoot();
      root = VectorSchemaRoot.create(pruned, allocator);
      try (ArrowRecordBatch prunedBatch =
          new ArrowRecordBatch(full.getLength(), keptNodes, keptBufs, full.getBodyCompression())) {
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

  private MessageResult next(MessageChannelReader r) throws IOException {
    try {
      return r.readNext();
    } catch (IOException | RuntimeException e) {
      throw fail("its Arrow stream does not parse: " + e);
    }
  }

  private IOException fail(String what) {
    return new IOException("segmentstore-jvm: " + where + what);
  }

  private void closeReader() throws IOException {
    if (reader != null) {
      reader.close();
      reader = null;
    }
  }

  private void closeRoot() {
    if (root != null) {
      root.close();
      root = null;
    }
  }

  @Override
  public void close() throws IOException {
    closeReader();
    closeRoot();
  }
}
