package twophase.iceberg;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * The driver half of one staged write. Iceberg's tasks write and close their data files as they
 * always do; Spark's output commit coordination lets one attempt of each task commit
 * ({@link #useCommitCoordinator}: a denied attempt's writer is aborted, which deletes its files);
 * the job commit hands the committed tasks' files over under the write's id and commits no
 * snapshot. A job abort is Iceberg's: it deletes the files the committed tasks wrote.
 */
final class StagedIcebergBatch implements BatchWrite {
  private final BatchWrite iceberg;
  private final StagedWriteSpec spec;
  private final Table table;

  StagedIcebergBatch(BatchWrite iceberg, StagedWriteSpec spec, Table table) {
    this.iceberg = iceberg;
    this.spec = spec;
    this.table = table;
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return iceberg.createBatchWriterFactory(info);
  }

  @Override
  public boolean useCommitCoordinator() {
    return true;
  }

  @Override
  public void onDataWriterCommit(WriterCommitMessage message) {
    iceberg.onDataWriterCommit(message);
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    List<List<DataFile>> tasks = new ArrayList<>(messages.length);
    for (WriterCommitMessage m : messages) {
      tasks.add(m == null ? List.of() : files(m));
    }
    StagedIcebergWrites.put(spec.writeId, StagedIcebergWrites.encode(table, tasks));
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    iceberg.abort(messages);
  }

  /** The data files of Iceberg's task commit message ({@code SparkWrite.TaskCommit#files()}). */
  private static List<DataFile> files(WriterCommitMessage message) {
    try {
      Method files = message.getClass().getDeclaredMethod("files");
      files.setAccessible(true);
      return Arrays.asList((DataFile[]) files.invoke(message));
    } catch (ReflectiveOperationException | ClassCastException e) {
      throw new IllegalStateException(
          "this Iceberg runtime's task commit message ("
              + message.getClass().getName()
              + ") has no files(): the staged Iceberg write does not support it",
          e);
    }
  }
}
