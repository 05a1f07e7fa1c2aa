package twophase.bench;

import java.io.IOException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.commit.magic.MagicS3GuardCommitter;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.JobStatus;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitter;

/**
 * The S3A magic committer with the job commit left to its caller: tasks write and commit as the
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
  @Override public void setupJob(JobContext context) throws IOException { delegate.setupJob(context); }
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
