package twophase.s3;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.commit.magic.MagicS3GuardCommitter;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.JobStatus;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitter;

/**
 * twophase's S3 committer (the S3 sink's Spark-staged writes): the S3A magic committer with the job commit left to its caller: tasks write and commit as the
 * magic committer makes them (each file a pending multipart upload, each committed task attempt a
 * .pendingset under the job's __magic directory); the job commit and the job cleanup do nothing,
 * so the uploads stay pending for a two-phase-commit driver to complete. A failed job aborts
 * nothing either: the magic committer's abort would abort every pending upload under the
 * destination, other checkpoints' included. Only the public PathOutputCommitter API is used.
 */
public class StagingCommitter extends PathOutputCommitter {
  private final MagicS3GuardCommitter delegate;

  public StagingCommitter(Path outputPath, TaskAttemptContext context) throws IOException {
    super(outputPath, context);
    this.delegate = new MagicS3GuardCommitter(outputPath, context);
  }

  @Override public Path getOutputPath() { return delegate.getOutputPath(); }
  @Override public Path getWorkPath() throws IOException { return delegate.getWorkPath(); }
  /** The write option naming where setupJob records that the write started (before any task runs). */
  public static final String MARKER = "twophase.staged.marker";

  @Override
  public void setupJob(JobContext context) throws IOException {
    delegate.setupJob(context);
    // a record that the write started, and when (its last-modified time), before any task runs:
    // the committer's uuid, then the id Spark names the write's files after (set by
    // StagingCommitProtocol; empty under another protocol), so that the lingering cleanup can
    // abort the upload of a file an attempt was killed while writing, which nothing else records
    Configuration conf = context.getConfiguration();
    String marker = conf.get(MARKER);
    if (marker != null && !marker.isEmpty()) {
      Path path = new Path(marker);
      FileSystem fs = path.getFileSystem(conf);
      String record = conf.get("fs.s3a.committer.uuid", "") + "\n"
          + conf.get(StagingCommitProtocol.FILE_JOB_ID, "") + "\n";
      try (FSDataOutputStream out = fs.create(path, true)) {
        out.write(record.getBytes(StandardCharsets.UTF_8));
      }
    }
  }
  @Override public void setupTask(TaskAttemptContext context) throws IOException { delegate.setupTask(context); }

  @Override
  public boolean needsTaskCommit(TaskAttemptContext context) throws IOException {
    return delegate.needsTaskCommit(context);
  }

  @Override public void commitTask(TaskAttemptContext context) throws IOException { delegate.commitTask(context); }
  @Override public void abortTask(TaskAttemptContext context) throws IOException { delegate.abortTask(context); }
  @Override public void commitJob(JobContext context) { }
  @Override @SuppressWarnings("deprecation") public void cleanupJob(JobContext context) { }
  @Override public void abortJob(JobContext context, JobStatus.State state) { }
}
