"""Weight sync, the end of step 6: a learner's new policy version as a file, published through the
object store or a shared directory, fetched and loaded by its side's rollout engines."""
