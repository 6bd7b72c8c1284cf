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
//	.locks/models--ORG--NAME/<etag>.lock  flock(2) lock held while downloading
//
// Requests follow huggingface_hub: HEAD {endpoint}/{repo}/resolve/{rev}/{file}
// (relative redirects followed, absolute ones recorded as the download
// location), X-Repo-Commit, X-Linked-Etag/ETag and X-Linked-Size/
// Content-Length for the metadata, and GET {endpoint}/api/models/{repo}/
// revision/{rev} for a repository's file list. Downloads go to
// blobs/<etag>.incomplete, resume with Range, are verified (sha256 for LFS
// files, git blob sha1 for the others) and renamed into place, so a partial
// or corrupt file never appears under blobs/.
//
// Library code never prints: warnings and debug lines go through Logger and
// download progress through ProgressFunc. The token is a Token, whose
// formatting always prints "<redacted>".
package hub
