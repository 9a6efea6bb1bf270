/* core/data/audio/prefix.c — Whisper's start sequence from a tokenizer's special tokens. */
#include "prefix.h"

#include "../../util/log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* openai/whisper's tokenizer.py LANGUAGES, in its order (the order of the <|xx|> tokens): the
 * 99 of every model before large-v3, then "yue", which large-v3 adds. */
static const char *const languages[][2] = {
    {"en", "english"},        {"zh", "chinese"},     {"de", "german"},        {"es", "spanish"},
    {"ru", "russian"},        {"ko", "korean"},      {"fr", "french"},        {"ja", "japanese"},
    {"pt", "portuguese"},     {"tr", "turkish"},     {"pl", "polish"},        {"ca", "catalan"},
    {"nl", "dutch"},          {"ar", "arabic"},      {"sv", "swedish"},       {"it", "italian"},
    {"id", "indonesian"},     {"hi", "hindi"},       {"fi", "finnish"},       {"vi", "vietnamese"},
    {"he", "hebrew"},         {"uk", "ukrainian"},   {"el", "greek"},         {"ms", "malay"},
    {"cs", "czech"},          {"ro", "romanian"},    {"da", "danish"},        {"hu", "hungarian"},
    {"ta", "tamil"},          {"no", "norwegian"},   {"th", "thai"},          {"ur", "urdu"},
    {"hr", "croatian"},       {"bg", "bulgarian"},   {"lt", "lithuanian"},    {"la", "latin"},
    {"mi", "maori"},          {"ml", "malayalam"},   {"cy", "welsh"},         {"sk", "slovak"},
    {"te", "telugu"},         {"fa", "persian"},     {"lv", "latvian"},       {"bn", "bengali"},
    {"sr", "serbian"},        {"az", "azerbaijani"}, {"sl", "slovenian"},     {"kn", "kannada"},
    {"et", "estonian"},       {"mk", "macedonian"},  {"br", "breton"},        {"eu", "basque"},
    {"is", "icelandic"},      {"hy", "armenian"},    {"ne", "nepali"},        {"mn", "mongolian"},
    {"bs", "bosnian"},        {"kk", "kazakh"},      {"sq", "albanian"},      {"sw", "swahili"},
    {"gl", "galician"},       {"mr", "marathi"},     {"pa", "punjabi"},       {"si", "sinhala"},
    {"km", "khmer"},          {"sn", "shona"},       {"yo", "yoruba"},        {"so", "somali"},
    {"af", "afrikaans"},      {"oc", "occitan"},     {"ka", "georgian"},      {"be", "belarusian"},
    {"tg", "tajik"},          {"sd", "sindhi"},      {"gu", "gujarati"},      {"am", "amharic"},
    {"yi", "yiddish"},        {"lo", "lao"},         {"uz", "uzbek"},         {"fo", "faroese"},
    {"ht", "haitian creole"}, {"ps", "pashto"},      {"tk", "turkmen"},       {"nn", "nynorsk"},
    {"mt", "maltese"},        {"sa", "sanskrit"},    {"lb", "luxembourgish"}, {"my", "myanmar"},
    {"bo", "tibetan"},        {"tl", "tagalog"},     {"mg", "malagasy"},      {"as", "assamese"},
    {"tt", "tatar"},          {"haw", "hawaiian"},   {"ln", "lingala"},       {"ha", "hausa"},
    {"ba", "bashkir"},        {"jw", "javanese"},    {"su", "sundanese"},     {"yue", "cantonese"},
};

const char *bora_whisper_language_code(const char *language)
{
    if (!language)
        return NULL;
    for (size_t i = 0; i < sizeof languages / sizeof languages[0]; i++)
        if (!strcasecmp(language, languages[i][0]) || !strcasecmp(language, languages[i][1]))
            return languages[i][0];
    return NULL;
}

/* The id of a special token the sequence needs, or a message naming it. */
static bora_status need(const bora_tokenizer *tok, const char *token, const char *why, int32_t *id)
{
    *id = bora_tokenizer_token_id(tok, token);
    if (*id < 0)
        return bora_error_set(BORA_ERR_INVALID,
                              "Whisper start sequence: the tokenizer has no %s token (%s)", token,
                              why);
    return BORA_OK;
}

bora_status bora_whisper_prefix(const bora_tokenizer *tok, const char *language, const char *task,
                                int timestamps, int32_t *ids, int *n)
{
    *n = 0;
    if (!task)
        task = "transcribe";
    if (strcmp(task, "transcribe") && strcmp(task, "translate"))
        return bora_error_set(BORA_ERR_INVALID,
                              "Whisper task '%s' is not one: use transcribe or translate", task);
    int32_t id;
    bora_status st = need(tok, "<|startoftranscript|>", "not a Whisper tokenizer?", &id);
    if (st != BORA_OK)
        return st;
    ids[(*n)++] = id;
    if (language) {
        const char *code = bora_whisper_language_code(language);
        if (!code)
            return bora_error_set(BORA_ERR_INVALID,
                                  "Whisper language '%s' is not one of Whisper's: give a code "
                                  "such as en or de, or an English name such as german",
                                  language);
        char token[16];
        snprintf(token, sizeof token, "<|%s|>", code);
        st = need(tok, token, "a language the model does not know", &id);
        if (st != BORA_OK)
            return st;
        ids[(*n)++] = id;
        snprintf(token, sizeof token, "<|%s|>", task);
        if ((id = bora_tokenizer_token_id(tok, token)) >= 0)
            ids[(*n)++] = id;
    }
    if (!timestamps) {
        st = need(tok, "<|notimestamps|>", "ask for timestamps instead", &id);
        if (st != BORA_OK)
            return st;
        ids[(*n)++] = id;
    }
    return BORA_OK;
}
