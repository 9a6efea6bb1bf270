/* core/data/audio/prefix.h — Whisper's start sequence: the tokens a decoder is given before
 * the text, as Hugging Face's WhisperTokenizer.prefix_tokens and openai/whisper's
 * sot_sequence make them.
 *
 *     int32_t ids[BORA_WHISPER_PREFIX_MAX];
 *     int n;
 *     if (bora_whisper_prefix(tok, NULL, "transcribe", 0, ids, &n) != BORA_OK) ...
 *     // English-only tokenizer: <|startoftranscript|> <|notimestamps|>  (50257 50362)
 *     bora_whisper_prefix(tok, "en", "transcribe", 0, ids, &n);
 *     // <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
 *
 * The training example for a clip's text is this sequence, the text's tokens and
 * <|endoftext|>; a transcription starts its decoder from it. */
#ifndef BORA_CORE_AUDIO_PREFIX_H
#define BORA_CORE_AUDIO_PREFIX_H

#include "../tokenizer.h"

#include <bora/plugin.h>
#include <stdint.h>

#define BORA_WHISPER_PREFIX_MAX 8 /* ids' capacity: the longest sequence is 4 */

/* The start sequence into ids (capacity BORA_WHISPER_PREFIX_MAX), *n of them:
 * <|startoftranscript|>; when language is non-NULL, its token <|xx|> (language is a code such
 * as "en", or Whisper's English name of one, "english") followed by <|transcribe|> or
 * <|translate|> (task; NULL means "transcribe") where the tokenizer has those tokens; then
 * <|notimestamps|> unless timestamps is nonzero. A tokenizer without <|startoftranscript|>
 * (not Whisper's), a language the tokenizer has no token for, or a task other than transcribe
 * or translate is refused with a message saying which. */
bora_status bora_whisper_prefix(const bora_tokenizer *tok, const char *language, const char *task,
                                int timestamps, int32_t *ids, int *n);

/* Whisper's code of a language given by code or English name ("english" -> "en"), or NULL. */
const char *bora_whisper_language_code(const char *language);

#endif
