package twophase.bench.kafka;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

/** The driver half: the job commit hands the tasks' open transactions over in a local file. */
public class TxnBatchWrite implements BatchWrite {
  private final Map<String, String> options;
  private final StructType schema;

  TxnBatchWrite(Map<String, String> options, StructType schema) {
    this.options = new HashMap<>(options);
    this.schema = schema;
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new TxnWriterFactory(options, schema);
  }

  @Override
  public boolean useCommitCoordinator() {
    return true;
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    StringBuilder lines = new StringBuilder();
    for (WriterCommitMessage m : messages) {
      if (m != null) {
        lines.append(((TxnCommitMessage) m).toJson()).append('\n');
      }
    }
    Path target = Paths.get(options.get("committables"));
    Path partial = Paths.get(target + ".part");
    try {
      Files.write(partial, lines.toString().getBytes(StandardCharsets.UTF_8));
      Files.move(partial, target, StandardCopyOption.ATOMIC_MOVE);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    // nothing: the open transactions are the 2PC driver's to abort (its lingering cleanup)
  }
}
