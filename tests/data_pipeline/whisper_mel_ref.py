"""Whisper's log-mel features in float64, written from Hugging Face's WhisperFeatureExtractor
(feature_extraction_whisper.py; audio_utils.py: window_function, spectrogram, mel_filter_bank
with norm="slaney", mel_scale="slaney"), for the shapes the golden file does not cover.

The WAV is read with Python's wave module (int16 / 32768), the STFT is torch.stft: nothing of
bora's decoding or FFT is involved.

usage: whisper_mel_ref.py IN.wav N_MELS N_SAMPLES OUT.bin   (writes (N_MELS, N_SAMPLES // 160) f32le)
"""
import sys
import wave

import numpy as np
import torch


def hertz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    mel = 3.0 * f / 200.0
    logstep = 27.0 / np.log(6.4)
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-300) / 1000.0) * logstep, mel)


def mel_to_hertz(m):
    m = np.asarray(m, dtype=np.float64)
    f = 200.0 * m / 3.0
    logstep = np.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), f)


def mel_filter_bank(n_bins, n_mels, fmin, fmax, rate):
    mel_freqs = np.linspace(hertz_to_mel(fmin), hertz_to_mel(fmax), n_mels + 2)
    filter_freqs = mel_to_hertz(mel_freqs)
    fft_freqs = np.linspace(0, rate // 2, n_bins)
    diff = np.diff(filter_freqs)
    slopes = filter_freqs[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    enorm = 2.0 / (filter_freqs[2 : n_mels + 2] - filter_freqs[:n_mels])
    return fb * enorm[None, :]  # (n_bins, n_mels)


def main():
    path, n_mels, n_samples, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getframerate() == 16000
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768.0
    x = x[:n_samples]
    x = np.pad(x, (0, n_samples - len(x)))
    n_fft, hop = 400, 160
    window = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
    stft = torch.stft(torch.from_numpy(x), n_fft, hop, window=window, center=True,
                      pad_mode="reflect", return_complex=True)
    power = (stft.abs() ** 2).numpy()[:, :-1]  # (n_bins, frames), last frame dropped
    fb = mel_filter_bank(n_fft // 2 + 1, n_mels, 0.0, 8000.0, 16000)
    mel = fb.T @ power
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    log_spec = (log_spec + 4.0) / 4.0
    log_spec.astype("<f4").tofile(out)


if __name__ == "__main__":
    main()
