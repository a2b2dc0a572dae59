"""Reference training programs run as job processes (under the job interpreter, e.g. .venv-jobs)."""
