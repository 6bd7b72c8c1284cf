// Package hub is a Hugging Face Hub client whose on-disk cache is the one
// huggingface_hub writes and reads, so a model downloaded by tputool is
// found by transformers/diffusers and the other way round.
//
// Cache layout (under HF_HUB_CACHE, by default ~/.cache/huggingface/hub):
//
//	models--ORG--NAME/
//	    blobs/<etag>                      file contents, named by ETag
//	    refs/<revision>                   commit hash a branch/tag resolved to
//	    snapshots/<commit>/<path>         relative symlinks into ../blobs
//	    .no_exist/<commit>/<path>         empty markers: file absent upstream
//	    blobs/<etag>.incomplete           a failed run's bytes, resumed next run
//	    blobs/<etag>.<8 hex>.incomplete   one writer's partial file
//	.locks/models--ORG--NAME/<etag>.lock  flock(2) lock held while downloading
//	                    (<etag>.lock.soft where the file system has no flock)
//
// Requests follow huggingface_hub: HEAD {endpoint}/{repo}/resolve/{rev}/{file}
// (relative redirects followed, absolute ones recorded as the download
// location), X-Repo-Commit, X-Linked-Etag/ETag and X-Linked-Size/
// Content-Length for the metadata, and GET {endpoint}/api/models/{repo}/
// revision/{rev} for a repository's file list. Each download writes a
// partial file of its own, resumes with Range, is verified as read back
// from the disk (size, and sha256 for LFS files, git blob sha1 for the
// others) and renamed into place, so a partial or corrupt file never
// appears under blobs/, even where locks exclude nobody.
//
// Library code never prints: warnings and debug lines go through Logger and
// download progress through ProgressFunc. The token is a Token, whose
// formatting always prints "<redacted>".
package hub
